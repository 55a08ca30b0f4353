"""`@register`, `Dispatch` and `Execute`: how one controller call becomes work on many workers.

Mirrors `verl/single_controller/base/decorator.py`. A worker class marks a method with
`@register(dispatch_mode=..., execute_mode=...)`. The decorator runs nothing by itself: it stores
three facts on the function, and a `WorkerGroup` (see `worker_group.py`) reads them to build a
*group method* of the same name on the controller side. Calling that group method does three steps:

1. **dispatch**: turn the controller's arguments into one argument list per worker (rank);
2. **execute**: call the method on every worker (`Execute.ALL`) or on rank 0 only (`Execute.RANK_ZERO`);
3. **collect**: turn the per-worker outputs into what the controller gets back.

So the controller code reads like single-process code (`out = actor_wg.compute_log_prob(batch)`)
while the batch is really split across data-parallel ranks and the pieces are concatenated back.

Every dispatch function here returns, for each argument, *one value per rank* (a list of length
`world_size`), and every execute function sends element `i` of each list to rank `i`. verl instead
lets some dispatch functions pass arguments through unchanged and has `execute_all` guess: split
when every argument is a list of `world_size` entries, otherwise send the same arguments to all
workers (`RayWorkerGroup.execute_all_async`, `verl/single_controller/ray/base.py:862`). minirl
makes the split explicit so a list of the wrong length is an error with a message, not a silent
broadcast.

Simplifications versus verl:

- `Dispatch`/`Execute` are plain `Enum`s. verl uses a `DynamicEnum`
  (`verl/utils/py_functional.py:259`) so that `register_dispatch_mode`
  (`verl/single_controller/base/decorator.py:338`) can add a named mode at runtime; in minirl a
  custom mode is a dict `{"dispatch_fn": ..., "collect_fn": ...}` passed to `@register`, which
  verl accepts as well (the nd-mesh mode below is one).
- verl also defines `Dispatch.RANK_ZERO` (no dispatch function behind it) and
  `Dispatch.DIRECT_ROLLOUT_METHOD` (a vLLM-executor special case); minirl leaves both out.
- Every mode that chunks a `DataProto` pads an uneven batch and the group removes the padding
  after collect. verl pads only in `DP_COMPUTE_PROTO`/`DP_COMPUTE_METRIC` and only when the batch
  has auto-padding switched on (`DataProto.is_padding_enabled`); elsewhere an uneven chunk fails.
- `register` wraps the method only to write the per-rank trace event of each call (when the
  worker's process records one). verl's wrapper materialises `DataProtoFuture` arguments on the
  worker (`_materialize_futures`, `verl/single_controller/base/decorator.py:383`); minirl resolves
  futures on the controller before dispatch (see `WorkerGroup`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from enum import Enum
from functools import partial, wraps
from typing import Any

# The attribute name under which @register stores its settings on the function
# (verl: MAGIC_ATTR = "attrs_3141562937", a name unlikely to clash with user attributes).
MAGIC_ATTR = "_minirl_register_attrs"

# Reserved keyword under which a DataProto dispatch tells the group how many padding rows it added;
# the group pops it before calling workers and strips that many rows after collect
# (verl: `_padding_size_key` in verl/protocol.py).
PADDING_SIZE_KEY = "_minirl_padding_size"


class Dispatch(Enum):
    """How a group method splits its arguments across workers and gathers their outputs.

    Mirrors `Dispatch` (`verl/single_controller/base/decorator.py:26`). With `n` workers:

    - `ONE_TO_ALL`: every rank gets the same arguments; the controller gets back a list of `n`
      outputs, one per rank. Used for set-up calls (`init_model`, `save_checkpoint`).
      verl: `dispatch_one_to_all` (`verl/single_controller/base/decorator.py:120`).
    - `ALL_TO_ALL`: the caller has already split: every argument must be a list of `n` entries and
      rank `i` gets entry `i`; returns the list of `n` outputs. The default mode of `@register`.
      verl: `dispatch_all_to_all` (`verl/single_controller/base/decorator.py:130`), which
      passes arguments through and lets `execute_all` split or broadcast them.
    - `DP_COMPUTE`: the same contract as `ALL_TO_ALL`, named for data-parallel work where each
      entry is that rank's share of the data; returns the list of `n` outputs.
      verl: `dispatch_dp_compute` (`verl/single_controller/base/decorator.py:148`).
    - `DP_COMPUTE_PROTO`: every argument is a `DataProto` of the same length; each is padded to a
      multiple of `n` and cut into `n` equal chunks, rank `i` gets chunk `i`; the `n` output
      `DataProto`s are concatenated in rank order and the padding rows are removed. With 5 rows and
      2 ranks: rank 0 gets rows 0-2, rank 1 rows 3, 4 and a copy of row 0; the controller gets 5 rows.
      verl: `dispatch_dp_compute_data_proto` (`verl/single_controller/base/decorator.py:167`) and
      `collect_dp_compute_data_proto` (`verl/single_controller/base/decorator.py:191`).
    - `DP_COMPUTE_PROTO_WITH_FUNC`: like `DP_COMPUTE_PROTO`, but the first positional argument
      is a function sent unchanged to every rank (`Worker.execute_with_func_generator`).
      verl: `dispatch_dp_compute_data_proto_with_func` (`verl/single_controller/base/decorator.py:180`).
    - `DP_COMPUTE_METRIC`: the batch is chunked as in `DP_COMPUTE_PROTO`, but the outputs are
      returned as a list of `n` values (e.g. one metrics dict per rank), not concatenated; padding
      rows, if any, were seen by the last ranks and stay in their values.
      verl: the DP_COMPUTE_PROTO dispatch with `collect_dp_compute` (`verl/single_controller/base/decorator.py:159`).

    A data-parallel mesh that is not one-rank-per-chunk (tensor or sequence parallel ranks sharing
    a chunk) uses the dict returned by `make_nd_compute_dataproto_dispatch_fn`: the batch is cut
    into `dp_size` chunks, every worker gets the chunk of its dp rank, and only the outputs of the
    workers flagged as "collect" (one per dp rank) are concatenated.
    """

    ONE_TO_ALL = "ONE_TO_ALL"
    ALL_TO_ALL = "ALL_TO_ALL"
    DP_COMPUTE = "DP_COMPUTE"
    DP_COMPUTE_PROTO = "DP_COMPUTE_PROTO"
    DP_COMPUTE_PROTO_WITH_FUNC = "DP_COMPUTE_PROTO_WITH_FUNC"
    DP_COMPUTE_METRIC = "DP_COMPUTE_METRIC"


class Execute(Enum):
    """Which workers run a group method (`Execute`, `verl/single_controller/base/decorator.py:50`).

    - `ALL`: every rank runs it (the group's `execute_all`).
    - `RANK_ZERO`: only rank 0 runs it, with rank 0's share of the dispatched arguments, and the
      controller gets rank 0's single output (the group's `execute_rank_zero`).
    """

    ALL = "ALL"
    RANK_ZERO = "RANK_ZERO"


# ---------------------------------------------------------------------------------------------
# Helpers shared by the dispatch functions
# ---------------------------------------------------------------------------------------------


def _named_arguments(args: tuple, kwargs: dict):
    """Yield (label, value) for every positional and keyword argument, for error messages."""
    for index, value in enumerate(args):
        yield f"positional argument {index}", value
    for key, value in kwargs.items():
        yield f"keyword argument '{key}'", value


def _describe(value: Any) -> str:
    name = type(value).__name__
    article = "an" if name[0].lower() in "aeiou" else "a"
    if isinstance(value, (list, tuple)):
        return f"{article} {name} of length {len(value)}"
    return f"{article} {name}"


_PER_RANK_HINT = "register the method with Dispatch.ONE_TO_ALL to send the same value to every worker"


def _check_one_entry_per_rank(
    mode_name: str, world_size: int, args: tuple, kwargs: dict, hint: str = _PER_RANK_HINT
) -> None:
    """Raise a clear error unless every argument is a list/tuple with `world_size` entries."""
    for label, value in _named_arguments(args, kwargs):
        if not isinstance(value, (list, tuple)) or len(value) != world_size:
            raise ValueError(
                f"{mode_name} expects every argument to be a list with one entry per worker "
                f"(world_size={world_size}), but {label} is {_describe(value)}. Pass "
                f"[value_for_rank_0, ..., value_for_rank_{world_size - 1}], or {hint}."
            )


def _split_data_protos_with_auto_padding(mode_name: str, chunks: int, args: tuple, kwargs: dict):
    """Pad every DataProto argument to a multiple of `chunks` and cut it into `chunks` pieces.

    Returns (per-chunk args, per-chunk kwargs, pad_size). All DataProto arguments must have the
    same length, so one pad size fits all of them. Paraphrases
    `_split_args_kwargs_data_proto_with_auto_padding` (`verl/single_controller/base/decorator.py:91`).
    """
    from minirl.protocol import DataProto, pad_dataproto_to_divisor

    length = None
    for label, value in _named_arguments(args, kwargs):
        if not isinstance(value, DataProto):
            raise TypeError(
                f"{mode_name} cuts every argument into per-worker chunks, so every argument must be "
                f"a DataProto, but {label} is {_describe(value)}. Put run-level values in "
                f"data.meta_info, or register the method with another Dispatch mode."
            )
        if length is None:
            length = len(value)
        elif len(value) != length:
            raise ValueError(
                f"{mode_name} needs every DataProto argument to have the same length, but the "
                f"first has {length} rows and {label} has {len(value)}."
            )

    pad_size = 0

    def pad_and_chunk(data):
        nonlocal pad_size
        padded, pad_size = pad_dataproto_to_divisor(data, chunks)
        return padded.chunk(chunks)

    split_args = [pad_and_chunk(arg) for arg in args]
    split_kwargs = {key: pad_and_chunk(value) for key, value in kwargs.items()}
    return split_args, split_kwargs, pad_size


def _with_padding_size(kwargs: dict, pad_size: int) -> dict:
    if pad_size > 0:
        kwargs[PADDING_SIZE_KEY] = pad_size
    return kwargs


def _concat_data_protos(mode_name: str, outputs: list, ranks: list[int]):
    """Concatenate worker outputs (DataProto) in the given order, with a clear error otherwise."""
    from minirl.protocol import DataProto

    for rank, output in zip(ranks, outputs):
        if not isinstance(output, DataProto):
            raise TypeError(
                f"{mode_name} collects by concatenating the workers' DataProto outputs, but rank "
                f"{rank} returned {_describe(output)}. Return a DataProto from the worker method, or "
                f"register it with Dispatch.DP_COMPUTE_METRIC to get one value per rank."
            )
    return DataProto.concat(outputs)


# ---------------------------------------------------------------------------------------------
# Dispatch and collect functions, one pair per mode. Signature: dispatch_fn(worker_group, *args,
# **kwargs) -> (args, kwargs) with one entry per rank in each; collect_fn(worker_group, outputs).
# ---------------------------------------------------------------------------------------------


def dispatch_one_to_all(worker_group, *args, **kwargs):
    """ONE_TO_ALL: repeat every argument once per rank (`verl/single_controller/base/decorator.py:120`)."""
    n = worker_group.world_size
    return tuple([arg] * n for arg in args), {key: [value] * n for key, value in kwargs.items()}


def dispatch_all_to_all(worker_group, *args, **kwargs):
    """ALL_TO_ALL: arguments are already per rank; check their length.

    verl passes them through unchecked (`dispatch_all_to_all`,
    `verl/single_controller/base/decorator.py:130`) and lets `execute_all` decide.
    """
    _check_one_entry_per_rank("Dispatch.ALL_TO_ALL", worker_group.world_size, args, kwargs)
    return args, kwargs


def collect_all_to_all(worker_group, output):
    """Return the per-rank outputs unchanged (`verl/single_controller/base/decorator.py:134`)."""
    return output


def dispatch_dp_compute(worker_group, *args, **kwargs):
    """DP_COMPUTE: each argument is a list of per-rank shares (`verl/single_controller/base/decorator.py:148`)."""
    _check_one_entry_per_rank("Dispatch.DP_COMPUTE", worker_group.world_size, args, kwargs)
    return args, kwargs


def collect_dp_compute(worker_group, output):
    """Return the list of per-rank outputs (`verl/single_controller/base/decorator.py:159`)."""
    if len(output) != worker_group.world_size:
        raise ValueError(f"expected {worker_group.world_size} outputs (one per rank), got {len(output)}")
    return list(output)


def dispatch_dp_compute_data_proto(worker_group, *args, **kwargs):
    """DP_COMPUTE_PROTO / DP_COMPUTE_METRIC: pad, then chunk every DataProto by world size.

    Rank `i` gets chunk `i`: with 4 rows and 2 ranks, rank 0 gets rows 0-1 and rank 1 rows 2-3.
    With 3 rows, one padding row is added first (see `pad_dataproto_to_divisor`) and removed after
    collect. Mirrors `dispatch_dp_compute_data_proto` (`verl/single_controller/base/decorator.py:167`).
    """
    split_args, split_kwargs, pad_size = _split_data_protos_with_auto_padding(
        "Dispatch.DP_COMPUTE_PROTO (or DP_COMPUTE_METRIC)", worker_group.world_size, args, kwargs
    )
    return split_args, _with_padding_size(split_kwargs, pad_size)


def dispatch_dp_compute_data_proto_with_func(worker_group, *args, **kwargs):
    """DP_COMPUTE_PROTO_WITH_FUNC: send `args[0]` (a function) to every rank, chunk the rest.

    Mirrors `dispatch_dp_compute_data_proto_with_func` (`verl/single_controller/base/decorator.py:180`),
    which does not pad; minirl pads as in DP_COMPUTE_PROTO.
    """
    if not args or not callable(args[0]):
        first = _describe(args[0]) if args else "missing"
        raise TypeError(
            f"Dispatch.DP_COMPUTE_PROTO_WITH_FUNC expects a function as the first positional argument "
            f"(it is sent to every worker), but it is {first}."
        )
    func, data_args = args[0], args[1:]
    split_args, split_kwargs, pad_size = _split_data_protos_with_auto_padding(
        "Dispatch.DP_COMPUTE_PROTO_WITH_FUNC", worker_group.world_size, data_args, kwargs
    )
    return [[func] * worker_group.world_size, *split_args], _with_padding_size(split_kwargs, pad_size)


def collect_dp_compute_data_proto(worker_group, output):
    """Concatenate the per-rank DataProto outputs in rank order (`verl/single_controller/base/decorator.py:191`)."""
    output = collect_dp_compute(worker_group, output)
    return _concat_data_protos("Dispatch.DP_COMPUTE_PROTO", output, list(range(len(output))))


# nd-mesh dispatch: when several workers share one data-parallel rank (e.g. 2 tensor-parallel
# ranks per data chunk), the batch is cut into dp_size chunks, not world_size chunks, and only one
# worker per dp rank (the "collect" rank) reports the result.


def dispatch_nd_compute_dataproto(dp_rank_mapping: list[int], dp_size: int, worker_group, *args, **kwargs):
    """Cut every DataProto into `dp_size` chunks; worker `i` gets chunk `dp_rank_mapping[i]`.

    With 4 workers in a (dp=2, tp=2) mesh, `dp_rank_mapping = [0, 0, 1, 1]`: workers 0 and 1 get
    chunk 0, workers 2 and 3 get chunk 1. Mirrors `dispatch_nd_compute_dataproto`
    (`verl/single_controller/base/decorator.py:250`), which does not pad; minirl pads.
    """
    split_args, split_kwargs, pad_size = _split_data_protos_with_auto_padding(
        "nd-mesh dispatch", dp_size, args, kwargs
    )
    world = range(worker_group.world_size)
    per_worker_args = tuple([chunks[dp_rank_mapping[i]] for i in world] for chunks in split_args)
    per_worker_kwargs = {key: [chunks[dp_rank_mapping[i]] for i in world] for key, chunks in split_kwargs.items()}
    return per_worker_args, _with_padding_size(per_worker_kwargs, pad_size)


def collect_nd_compute_dataproto(collect_mask: list[bool], dp_rank_mapping: list[int], worker_group, output):
    """Keep the outputs of the flagged workers only and concatenate them in dp-rank order.

    With mapping `[0, 0, 1, 1]` and mask `[True, False, True, False]`, the outputs of workers 0
    and 2 (dp ranks 0 and 1) are concatenated; workers 1 and 3 computed the same chunks and are
    ignored. Mirrors `collect_nd_compute` (`verl/single_controller/base/decorator.py:236`) and
    `collect_nd_compute_dataproto` (`verl/single_controller/base/decorator.py:255`); verl keeps
    the flagged outputs in worker order, minirl orders them by dp rank and checks that each dp
    rank is flagged exactly once.
    """
    if len(output) != worker_group.world_size:
        raise ValueError(f"expected {worker_group.world_size} outputs (one per worker), got {len(output)}")
    flagged = [rank for rank in range(worker_group.world_size) if collect_mask[rank]]
    dp_ranks = sorted(dp_rank_mapping[rank] for rank in flagged)
    dp_size = max(dp_rank_mapping) + 1
    if dp_ranks != list(range(dp_size)):
        raise ValueError(
            f"nd-mesh collect needs exactly one collect worker per dp rank 0..{dp_size - 1}, but the "
            f"flagged workers {flagged} have dp ranks {dp_ranks}. Each worker registers "
            f"(dp_rank, is_collect) with Worker._register_dispatch_collect_info; flag one worker per dp rank."
        )
    flagged.sort(key=lambda rank: dp_rank_mapping[rank])
    return _concat_data_protos("nd-mesh collect", [output[rank] for rank in flagged], flagged)


def _dispatch_info(worker_group, mesh_name: str) -> list[int]:
    """Ask the workers once for their dp rank in `mesh_name`, then cache it on the group."""
    if mesh_name not in worker_group._dispatch_info:
        mapping = list(worker_group._query_dispatch_info(mesh_name))
        dp_size = max(mapping) + 1
        if sorted(set(mapping)) != list(range(dp_size)):
            raise ValueError(
                f"mesh '{mesh_name}': the workers' dp ranks {mapping} do not cover 0..{dp_size - 1}; "
                f"every dp rank needs at least one worker."
            )
        worker_group._dispatch_info[mesh_name] = mapping
    return worker_group._dispatch_info[mesh_name]


def dispatch_lazy_compute_data_proto(mesh_name: str, worker_group, *args, **kwargs):
    """Look up (first call: query) each worker's dp rank for `mesh_name`, then nd-dispatch.

    Mirrors `dispatch_lazy_compute_data_proto` (`verl/single_controller/base/decorator.py:266`).
    """
    mapping = _dispatch_info(worker_group, mesh_name)
    return dispatch_nd_compute_dataproto(mapping, max(mapping) + 1, worker_group, *args, **kwargs)


def collect_lazy_compute_data_proto(mesh_name: str, worker_group, output):
    """Look up (first call: query) which workers report for `mesh_name`, then nd-collect.

    Mirrors `collect_lazy_compute_data_proto` (`verl/single_controller/base/decorator.py:282`).
    """
    mapping = _dispatch_info(worker_group, mesh_name)
    if mesh_name not in worker_group._collect_info:
        worker_group._collect_info[mesh_name] = [bool(flag) for flag in worker_group._query_collect_info(mesh_name)]
    return collect_nd_compute_dataproto(worker_group._collect_info[mesh_name], mapping, worker_group, output)


def make_nd_compute_dataproto_dispatch_fn(mesh_name: str) -> dict[str, Callable]:
    """A dispatch mode for a named device mesh: chunk by dp rank, collect from flagged workers.

    Each worker calls `self._register_dispatch_collect_info(mesh_name, dp_rank, is_collect)` when
    it builds its mesh; a method registered with
    `@register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn("actor"))` then sends chunk
    `dp_rank` of every DataProto argument to each worker and concatenates the outputs of the
    workers that registered `is_collect=True`. Mirrors `make_nd_compute_dataproto_dispatch_fn`
    (`verl/single_controller/base/decorator.py:300`).
    """
    return {
        "dispatch_fn": partial(dispatch_lazy_compute_data_proto, mesh_name),
        "collect_fn": partial(collect_lazy_compute_data_proto, mesh_name),
    }


# ---------------------------------------------------------------------------------------------
# Tables from mode to functions, and the decorator itself
# ---------------------------------------------------------------------------------------------

DISPATCH_MODE_FN_REGISTRY: dict[Dispatch, dict[str, Callable]] = {
    Dispatch.ONE_TO_ALL: {"dispatch_fn": dispatch_one_to_all, "collect_fn": collect_all_to_all},
    Dispatch.ALL_TO_ALL: {"dispatch_fn": dispatch_all_to_all, "collect_fn": collect_all_to_all},
    Dispatch.DP_COMPUTE: {"dispatch_fn": dispatch_dp_compute, "collect_fn": collect_dp_compute},
    Dispatch.DP_COMPUTE_PROTO: {
        "dispatch_fn": dispatch_dp_compute_data_proto,
        "collect_fn": collect_dp_compute_data_proto,
    },
    Dispatch.DP_COMPUTE_PROTO_WITH_FUNC: {
        "dispatch_fn": dispatch_dp_compute_data_proto_with_func,
        "collect_fn": collect_dp_compute_data_proto,
    },
    Dispatch.DP_COMPUTE_METRIC: {"dispatch_fn": dispatch_dp_compute_data_proto, "collect_fn": collect_dp_compute},
}


def get_predefined_dispatch_fn(dispatch_mode: Dispatch) -> dict[str, Callable]:
    """The {"dispatch_fn", "collect_fn"} pair of a mode (`get_predefined_dispatch_fn`, `verl/single_controller/base/decorator.py:334`)."""
    return DISPATCH_MODE_FN_REGISTRY[dispatch_mode]


def get_predefined_execute_fn(execute_mode: Execute) -> dict[str, str]:
    """The name of the WorkerGroup method that runs a mode (`get_predefined_execute_fn`, `verl/single_controller/base/decorator.py:357`)."""
    return {
        Execute.ALL: {"execute_fn_name": "execute_all"},
        Execute.RANK_ZERO: {"execute_fn_name": "execute_rank_zero"},
    }[execute_mode]


def _check_dispatch_mode(dispatch_mode) -> None:
    if isinstance(dispatch_mode, Dispatch):
        return
    if isinstance(dispatch_mode, dict) and {"dispatch_fn", "collect_fn"} <= dispatch_mode.keys():
        return
    raise TypeError(
        f"dispatch_mode must be a Dispatch member or a dict with 'dispatch_fn' and 'collect_fn', "
        f"got {dispatch_mode!r}."
    )


def _check_execute_mode(execute_mode) -> None:
    if not isinstance(execute_mode, Execute):
        raise TypeError(f"execute_mode must be an Execute member (Execute.ALL or Execute.RANK_ZERO), got {execute_mode!r}.")


def register(
    dispatch_mode: Dispatch | dict = Dispatch.ALL_TO_ALL,
    execute_mode: Execute = Execute.ALL,
    blocking: bool = True,
    materialize_futures: bool = True,
):
    """Mark a worker method as callable through a WorkerGroup (`register`, `verl/single_controller/base/decorator.py:398`).

    Args:
        dispatch_mode: a `Dispatch` member, or a dict with `dispatch_fn` and `collect_fn` (e.g.
            `make_nd_compute_dataproto_dispatch_fn("actor")`): how arguments are split and outputs gathered.
        execute_mode: `Execute.ALL` (every rank runs the method) or `Execute.RANK_ZERO`.
        blocking: if False, the group method returns at once with a future; `.get()` waits for the
            workers and returns the collected output.
        materialize_futures: if True, future arguments (outputs of a non-blocking call) are waited
            for before dispatch, so the worker receives real data.

    The settings are stored as a dict under `MAGIC_ATTR`. While the worker's process records a trace
    (`Worker.init_trace`), each call also writes one per-rank `worker` event: rank, dispatch and
    collect, local inputs and output, the engine's micro-batches (see `minirl.trace.worker_trace`);
    otherwise the call runs as written. verl wraps the method too, to materialise futures.
    """
    _check_dispatch_mode(dispatch_mode)
    _check_execute_mode(execute_mode)

    def decorator(func):
        attrs = {
            "dispatch_mode": dispatch_mode,
            "execute_mode": execute_mode,
            "blocking": blocking,
            "materialize_futures": materialize_futures,
        }
        if inspect.iscoroutinefunction(func) or func.__name__.startswith("_") or func.__name__ in UNTRACED:
            setattr(func, MAGIC_ATTR, attrs)  # plumbing (mesh queries, trace set-up): never recorded
            return func

        @wraps(func)
        def inner(self, *args, **kwargs):
            from minirl.trace.worker_trace import get_worker_tracer

            if get_worker_tracer() is None:  # the common case: this process records no worker events
                return func(self, *args, **kwargs)
            return _traced_call(func, attrs, self, args, kwargs)

        setattr(inner, MAGIC_ATTR, attrs)
        return inner

    return decorator


# Registered methods that set up or tear down the worker trace itself.
UNTRACED = frozenset({"init_trace", "close_trace"})


def describe_dispatch(dispatch_mode) -> tuple[str, str, str | None]:
    """`(dispatch, collect, mesh)` names of a mode, for the per-rank trace.

    `collect` says how the controller gathers the outputs: `list` (one entry per rank), `concat` (the
    DataProtos concatenated in rank order) or `concat_collect_ranks` (nd-mesh: one rank per dp rank);
    the trace writes `rank_zero` for a method run with `Execute.RANK_ZERO`.
    """
    if isinstance(dispatch_mode, Dispatch):
        collect = {Dispatch.DP_COMPUTE_PROTO: "concat", Dispatch.DP_COMPUTE_PROTO_WITH_FUNC: "concat"}
        return dispatch_mode.name, collect.get(dispatch_mode, "list"), None
    fn = dispatch_mode.get("dispatch_fn")
    mesh = fn.args[0] if isinstance(fn, partial) and fn.func is dispatch_lazy_compute_data_proto else None
    return (f"nd_mesh:{mesh}", "concat_collect_ranks", mesh) if mesh else ("custom", "custom", None)


def _traced_call(func, attrs: dict, worker, args: tuple, kwargs: dict):
    """Run one registered method on a worker and write its `worker` event (`minirl.trace.worker_trace`)."""
    from minirl.trace.worker_trace import describe_value, worker_call

    dispatch, collect, mesh = describe_dispatch(attrs["dispatch_mode"])
    if attrs["execute_mode"] is Execute.RANK_ZERO:
        collect = "rank_zero"  # only rank 0 ran: its output is the answer
    rank = int(getattr(worker, "rank", 0))
    record = {"worker": type(worker).__name__, "role": getattr(worker, "role", None), "method": func.__name__,
              "rank": rank, "world_size": int(getattr(worker, "world_size", 1)), "dispatch": dispatch,
              "execute": attrs["execute_mode"].name, "collect": collect}
    if mesh is not None:  # nd-mesh: the dp rank this worker's chunk belongs to, and whether it reports
        record["dp_rank"] = getattr(worker, "_dispatch_dp_rank", {}).get(mesh)
        record["collected"] = getattr(worker, "_collect_dp_rank", {}).get(mesh)
    else:
        record["collected"] = attrs["execute_mode"] is Execute.ALL or rank == 0
    with worker_call(record, args, kwargs) as call:
        out = func(worker, *args, **kwargs)
        if call is not None:
            call["output"] = describe_value(out)
    return out
