r"""The pipeline schedule: micro-batches streamed through the stages, one forward, one backward (1F1B).

A small rebuild of megatron-core's `megatron/core/pipeline_parallel/schedules.py`, which verl's
Megatron engine calls through `get_forward_backward_func()` (`MegatronEngine.forward_backward_batch`,
`verl/workers/engine/megatron/transformer_impl.py:835`). megatron-core's schedule cannot run on a
CPU-only torch (it allocates CUDA tensors), so minirl writes its own, with megatron's names:

- `forward_backward_no_pipelining` (one stage): forward and backward of each micro-batch in turn,
  gradients accumulating;
- `forward_backward_pipelining_without_interleaving` (the **1F1B** schedule): with $P$ stages and
  $M$ micro-batches, stage $s$ first runs $w_s = \min(P - s - 1, M)$ *warm-up* forwards, then
  alternates one forward and one backward ($M - w_s$ times, the steady state), then runs the
  $w_s$ *cool-down* backwards. A stage keeps at most $w_s + 1$ micro-batches' activations alive
  (GPipe, all forwards then all backwards, keeps $M$). Each stage idles while the pipeline fills
  and drains; in units of one micro-batch's forward + backward the idle share (the *bubble*) is

  $$\text{bubble} = \frac{P - 1}{M + P - 1},$$

  which is why a data-parallel chunk needs many more micro-batches than there are stages.

Between stages (megatron-core's `p2p_communication.py`): `recv_forward` / `send_forward` carry a
micro-batch's hidden states to the next stage, `recv_backward` / `send_backward` carry their
gradient back, and the steady state pairs them (`send_forward_recv_backward`,
`send_backward_recv_forward`) as non-blocking sends and receives that are waited on together, so
two neighbouring stages never both block on a send. The shapes are known on both sides (every
pipeline rank receives the micro-batch, so it computes `[b, t, hidden]` itself); megatron-core
exchanges shapes first when `variable_seq_lengths` is set.

Every forward and backward is recorded in a `ScheduleRecorder` (op, micro-batch, start and end
time): the engine writes it into the rank's trace (`minirl.trace.worker_trace.note_pipeline_schedule`),
which is how chapter 07 draws the schedule from a run. megatron-core records nothing of the sort
(its timers time whole phases).

What minirl simplifies: no interleaved (virtual-pipeline) schedule, no overlap of communication
with compute, no deallocation of sent activations (`deallocate_output_tensor`), blocking waits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

__all__ = ["P2PCommunicator", "ScheduleRecorder", "bubble_fraction", "forward_backward_no_pipelining",
           "forward_backward_pipelining_without_interleaving", "get_forward_backward_func"]


def bubble_fraction(pp: int, num_micro_batches: int) -> float:
    r"""The idle share of an ideal 1F1B (or GPipe) pipeline, $(P-1)/(M+P-1)$, for equal-cost stages."""
    return (pp - 1) / (num_micro_batches + pp - 1)


@dataclass
class ScheduleRecorder:
    """The ops one stage ran: `{"op": "forward" | "backward", "micro_batch": i, "t_start", "t_end"}` (wall clock)."""

    ops: list = field(default_factory=list)

    def run(self, op: str, micro_batch: int, fn: Callable, *args):
        t0 = time.time()
        out = fn(*args)
        self.ops.append({"op": op, "micro_batch": micro_batch, "t_start": t0, "t_end": time.time()})
        return out


class P2PCommunicator:
    """Sends and receives between neighbouring stages of one pipeline (megatron-core's `p2p_communication`).

    `prev_rank` / `next_rank` are global ranks (None at the ends of the pipeline). Each method posts
    its sends and receives as `isend` / `irecv` and waits for all of them (megatron-core's
    `_communicate` with `batch_isend_irecv`).
    """

    def __init__(self, prev_rank: int | None, next_rank: int | None, dtype: torch.dtype, device: torch.device):
        self.prev_rank, self.next_rank, self.dtype, self.device = prev_rank, next_rank, dtype, device

    def _communicate(self, send_next=None, send_prev=None, recv_prev_shape=None, recv_next_shape=None):
        ops, recv_prev, recv_next = [], None, None
        if recv_prev_shape is not None and self.prev_rank is not None:
            recv_prev = torch.empty(recv_prev_shape, dtype=self.dtype, device=self.device)
            ops.append(dist.irecv(recv_prev, src=self.prev_rank))
        if recv_next_shape is not None and self.next_rank is not None:
            recv_next = torch.empty(recv_next_shape, dtype=self.dtype, device=self.device)
            ops.append(dist.irecv(recv_next, src=self.next_rank))
        sent = []  # the tensors being sent stay referenced until their sends complete
        if send_next is not None and self.next_rank is not None:
            sent.append(send_next.detach().contiguous())
            ops.append(dist.isend(sent[-1], dst=self.next_rank))
        if send_prev is not None and self.prev_rank is not None:
            sent.append(send_prev.detach().contiguous())
            ops.append(dist.isend(sent[-1], dst=self.prev_rank))
        for op in ops:
            op.wait()
        return recv_prev, recv_next

    def recv_forward(self, shape):
        return self._communicate(recv_prev_shape=shape)[0]

    def send_forward(self, output):
        self._communicate(send_next=output)

    def recv_backward(self, shape):
        return self._communicate(recv_next_shape=shape)[1]

    def send_backward(self, input_grad):
        self._communicate(send_prev=input_grad)

    def send_forward_recv_backward(self, output, shape):
        return self._communicate(send_next=output, recv_next_shape=shape)[1]

    def send_backward_recv_forward(self, input_grad, shape):
        return self._communicate(send_prev=input_grad, recv_prev_shape=shape)[0]


def _backward_step(input_tensor, output_tensor, output_grad):
    """Backpropagate one micro-batch through this stage; return the gradient of its input (None on stage 0).

    On the last stage `output_tensor` is the loss and `output_grad` None (megatron-core's `backward_step`).
    """
    if input_tensor is not None and input_tensor.requires_grad:
        input_tensor.retain_grad()
    if output_tensor is not None:
        torch.autograd.backward(output_tensor, grad_tensors=output_grad)
    return None if input_tensor is None or not input_tensor.requires_grad else input_tensor.grad


def forward_backward_no_pipelining(forward_step: Callable, num_micro_batches: int, forward_only: bool,
                                   recorder: ScheduleRecorder, **_) -> None:
    """One stage: forward (and backward) of each micro-batch in turn; gradients accumulate."""
    for i in range(num_micro_batches):
        output = recorder.run("forward", i, forward_step, i, None)
        if not forward_only:
            recorder.run("backward", i, _backward_step, None, output, None)


def forward_backward_pipelining_without_interleaving(
        forward_step: Callable, num_micro_batches: int, forward_only: bool, recorder: ScheduleRecorder,
        p2p: P2PCommunicator, tensor_shape: Callable, pp_rank: int, pp_size: int) -> None:
    """The 1F1B schedule for this stage: warm-up forwards, steady one-forward-one-backward, cool-down backwards.

    `forward_step(i, input)` runs micro-batch `i` on this stage (`input`: None on the first stage,
    else the hidden states received) and returns what goes on: the hidden states, or on the last
    stage the loss (None when forward-only). `tensor_shape(i)` is the shape of micro-batch `i`'s
    hidden states between stages.
    """
    warmup = min(pp_size - pp_rank - 1, num_micro_batches)
    remaining = num_micro_batches - warmup
    inputs, outputs = [], []

    def received(t):
        return t.requires_grad_() if t is not None and not forward_only else t

    for i in range(warmup):
        x = received(p2p.recv_forward(tensor_shape(i)))
        y = recorder.run("forward", i, forward_step, i, x)
        p2p.send_forward(y)
        if not forward_only:
            inputs.append(x)
            outputs.append(y)

    x = received(p2p.recv_forward(tensor_shape(warmup))) if remaining > 0 else None
    for i in range(remaining):
        last_iteration = i == remaining - 1
        forward_mb = warmup + i
        y = recorder.run("forward", forward_mb, forward_step, forward_mb, x)
        if forward_only:
            p2p.send_forward(y)
            x = None if last_iteration else received(p2p.recv_forward(tensor_shape(forward_mb + 1)))
            continue
        dy = p2p.send_forward_recv_backward(y, tensor_shape(i))
        inputs.append(x)
        outputs.append(y)
        dx = recorder.run("backward", i, _backward_step, inputs.pop(0), outputs.pop(0), dy)
        if last_iteration:
            p2p.send_backward(dx)
        else:
            x = received(p2p.send_backward_recv_forward(dx, tensor_shape(forward_mb + 1)))

    if not forward_only:
        for i in range(warmup):
            backward_mb = remaining + i
            dy = p2p.recv_backward(tensor_shape(backward_mb))
            dx = recorder.run("backward", backward_mb, _backward_step, inputs.pop(0), outputs.pop(0), dy)
            p2p.send_backward(dx)


def get_forward_backward_func(pp_size: int) -> Callable:
    """megatron-core's `get_forward_backward_func`: 1F1B with several stages, the plain loop with one."""
    return forward_backward_pipelining_without_interleaving if pp_size > 1 else forward_backward_no_pipelining
