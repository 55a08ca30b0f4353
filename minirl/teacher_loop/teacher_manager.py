"""The agent loop's side of the teacher: turn one finished session into the teacher's log-probs.

verl: `AsyncTeacherLLMServerManager` (`verl/experimental/teacher_loop/teacher_manager.py:78`), built by
every agent-loop worker from the clients the trainer hands it. For each finished training session,
`compute_teacher_logprobs_single` (`:115`) sends the whole sequence, prompt + the student's response,
to the teacher as an ordinary `generate` request with `max_tokens=1`, `temperature=1.0` and
`prompt_logprobs` = `topk` for a top-k loss or 0 for an estimator (`_get_teacher_sampling_params`,
`:35`): the teacher does one forward pass over the student's tokens and returns, for every position,
the log-prob of the token that follows (or its top-k tokens). So the teacher's signal is on exactly
the states the student visited: on-policy.

With several teachers, the sample's `distillation.teacher_key` column (default `data_source`) picks
the teacher whose `key` matches (`_resolve_teacher_key`, `:99`); a single teacher takes every sample.

minirl simplification: the outputs stay unpadded (verl pads them to the batch's prompt/response
widths right away, `_pad_teacher_outputs`, `:59`, and keeps the whole sequence; minirl's agent loop
keeps the response part, which is all the losses read).
"""

from __future__ import annotations

import sys
import uuid

import torch

from minirl.config.schema_distillation import DistillationLossConfig
from minirl.trainer.distillation.losses import get_distillation_loss_settings
from minirl.utils.config import cfg_get
from minirl.workers.rollout.base import SamplingParams

__all__ = ["AsyncTeacherLLMServerManager"]


def _get_teacher_sampling_params(inference, distillation_loss) -> SamplingParams:
    """One token, temperature 1, and the prompt scored: `topk` tokens for a top-k loss, else the token itself.

    A teacher temperature other than 1 is ignored with a warning, as verl does: scoring tokens that
    are already there is one forward pass, no sampling (verl: the function of the same name).
    """
    temperature = float(cfg_get(inference, "temperature", 1.0))
    if temperature != 1.0:
        print(f"[minirl] distillation: teacher inference temperature {temperature} has no effect on prompt "
              "log-probs (a forward pass, no sampling); using 1.0.", file=sys.stderr)
    mode = str(cfg_get(distillation_loss, "loss_mode", "k3"))
    k = int(cfg_get(distillation_loss, "topk", DistillationLossConfig.topk)) if get_distillation_loss_settings(
        mode).use_topk else 0
    return SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=k, logprobs=False)


class AsyncTeacherLLMServerManager:
    """Routes each session to its teacher and asks for the teacher's log-probs of the student's tokens.

    Args:
        config: the whole trainer config (reads `distillation`).
        teacher_client: `{key: LLMServerClient}` from `MultiTeacherModelManager.get_client()`.
    """

    def __init__(self, config, teacher_client: dict) -> None:
        from minirl.teacher_loop.teacher_model import resolve_teacher_models

        self.distillation_config = config.distillation
        self.teacher_key = str(self.distillation_config.teacher_key)
        self.teacher_models = resolve_teacher_models(self.distillation_config)
        if set(teacher_client) != set(self.teacher_models):
            raise ValueError(f"teacher client keys {sorted(teacher_client)} do not match the teacher routing keys "
                             f"{sorted(self.teacher_models)}.")
        self.teacher_client = teacher_client
        self.sampling_params = {key: _get_teacher_sampling_params(t.get("inference"),
                                                                 self.distillation_config.distillation_loss)
                                for key, t in self.teacher_models.items()}

    def _resolve_teacher_key(self, routing_key) -> str:
        if len(self.teacher_models) == 1:  # a single teacher takes every sample, whatever its key
            return next(iter(self.teacher_models))
        if routing_key is None:
            raise ValueError(f"multi-teacher distillation needs each sample's routing value (the row's "
                             f"{self.teacher_key!r} column, distillation.teacher_key); this sample has none.")
        if routing_key not in self.teacher_models:
            raise ValueError(f"no teacher for routing key {routing_key!r} (the sample's {self.teacher_key!r}); "
                             f"teachers: {sorted(self.teacher_models)}. Fix: a teacher_models entry with that key.")
        return routing_key

    async def compute_teacher_logprobs_single(self, sequence_ids: list[int], routing_key=None
                                              ) -> tuple[torch.Tensor, torch.Tensor]:
        """The teacher's `(ids, log-probs)` for one unpadded sequence: two `[S, K]` tensors (K = topk, or 1).

        Row `i` scores token `i + 1` of `sequence_ids` (the last row is a zero pad), so the response
        tokens `P .. P+R-1` are rows `P-1 .. P+R-2`.
        """
        key = self._resolve_teacher_key(routing_key)
        out = await self.teacher_client[key].generate(request_id=uuid.uuid4().hex, prompt_ids=list(sequence_ids),
                                                      sampling_params=self.sampling_params[key])
        ids = torch.tensor(out.extra_fields["prompt_ids"], dtype=torch.int64)
        logprobs = torch.tensor(out.extra_fields["prompt_logprobs"], dtype=torch.float32)
        if not ids.shape[0] == logprobs.shape[0] == len(sequence_ids):
            raise RuntimeError(f"teacher {key!r} returned {ids.shape[0]} scored positions for a sequence of "
                               f"{len(sequence_ids)} tokens.")
        return ids, logprobs
