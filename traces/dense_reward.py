"""A dense reward for the reference traces (`reward.custom_reward_function.path=traces/dense_reward.py`).

The embedded model starts from random weights and never writes `#### <answer>`, so the arithmetic
scorer gives 0 to every sample: every GRPO advantage is 0, the policy loss and its gradient are 0
and the actor never moves. A trace of that run would not notice a broken loss. This score, the share
of digits in the response (plus 1 for the right answer), differs between the n samples of a prompt,
so the advantages, the losses and the weight update in the reference traces are real.
"""

from minirl.utils.reward_score.arithmetic import compute_score as arithmetic_score


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    digits = sum(ch.isdigit() for ch in solution_str) / max(len(solution_str), 1)
    return digits + arithmetic_score(solution_str, ground_truth)
