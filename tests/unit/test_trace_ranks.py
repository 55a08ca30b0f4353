"""Per-rank worker events: every registered call on a worker writes what that rank got and did.

In-process worker groups (no Ray, no process group) make the events of several ranks in one process;
the engine test (tests/e2e/test_engine_torchtitan.py) and the fsdp_2rank reference trace cover real ranks
and their collectives.
"""

from __future__ import annotations

import json

import pytest
import torch

import minirl.cli
from minirl.protocol import DataProto
from minirl.single_controller import (
    Dispatch,
    InProcessWorkerGroup,
    ResourcePool,
    Worker,
    make_nd_compute_dataproto_dispatch_fn,
    register,
)
from minirl.trace import read_trace
from minirl.trace.compare import compare_traces
from minirl.trace.recorder import Tracer
from minirl.trace.schema import TraceFormatError
from minirl.trace.show import format_ranks, rank_table, worker_events
from minirl.trace.worker_trace import close_worker_tracer, get_worker_tracer


class MeshWorker(Worker):
    """Two ranks per dp rank, as tensor parallelism lays them out: (dp, tp) = divmod(rank, 2)."""

    def __init__(self):
        super().__init__()
        self.role = "actor"
        self._register_dispatch_collect_info("actor", dp_rank=self.rank // 2, is_collect=self.rank % 2 == 0)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def double(self, data: DataProto) -> DataProto:
        return DataProto.from_dict({"y": data.batch["x"] * 2})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def rows(self, data: DataProto) -> DataProto:
        return DataProto.from_dict({"n": torch.full((len(data),), float(len(data)))})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def hello(self, path: str):
        return self.rank


@pytest.fixture
def traced_group(tmp_path):
    """A controller trace with one stage around each group call, and 4 in-process mesh workers recording."""
    trace_dir = tmp_path / "trace"
    tracer = Tracer(trace_dir, level="fields", run_id="run1")
    wg = InProcessWorkerGroup(ResourcePool(process_on_nodes=[4]), MeshWorker)
    assert wg.init_trace(str(trace_dir), "fields", "run1") == [True] * 4
    yield tracer, wg, trace_dir
    wg.close_trace()
    tracer.close()


def _run_stage(tracer, name, step, fn):
    batch = DataProto.from_dict({"x": torch.arange(8.0)})
    with tracer.span(name, batch, step=step, role="actor"):
        return fn(batch)


def test_every_call_writes_one_event_per_rank_with_dispatch_collect_and_local_shapes(traced_group):
    tracer, wg, trace_dir = traced_group
    out = _run_stage(tracer, "old_log_prob", 1, wg.double)
    assert out.batch["y"].tolist() == [2.0 * i for i in range(8)]  # recording changes nothing
    _run_stage(tracer, "values", 1, wg.rows)
    wg.hello("/abs/path/model")
    wg.close_trace()
    tracer.close()
    assert get_worker_tracer() is None
    events = read_trace(trace_dir)
    assert (trace_dir / "trace.rank0.jsonl").exists()  # one part file per process: the in-process ranks share it
    calls = worker_events(events)
    nd = [e for e in calls if e["method"] == "double"]
    # nd-mesh: 2 chunks of 4 rows; ranks 0, 1 got chunk 0 and only rank 0 (tp rank 0) reports
    assert [(e["rank"], e["dp_rank"], e["collected"], e["inputs"][0]["rows"]) for e in nd] == \
        [(0, 0, True, 4), (1, 0, False, 4), (2, 1, True, 4), (3, 1, False, 4)]
    assert {e["dispatch"] for e in nd} == {"nd_mesh:actor"} and {e["collect"] for e in nd} == {"concat_collect_ranks"}
    assert nd[0]["inputs"][0]["batch"] == {"x": [4]} and nd[0]["output"]["batch"] == {"y": [4]}
    proto = [e for e in calls if e["method"] == "rows"]
    assert [(e["dispatch"], e["collect"], e["inputs"][0]["rows"]) for e in proto] == [("DP_COMPUTE_PROTO", "concat", 2)] * 4
    hello = [e for e in calls if e["method"] == "hello"]
    assert [e["inputs"][0]["value"] for e in hello] == ["<path>"] * 4  # machine paths never reach the trace
    assert all(e["role"] == "actor" and e["worker"] == "MeshWorker" and e["world_size"] == 4 for e in calls)
    # plumbing is not recorded: the nd-mesh queries and the trace set-up itself
    assert not {e["method"] for e in calls} & {"_query_dispatch_info", "_query_collect_info", "init_trace"}

    rows = rank_table(events, step=1)
    assert [(r["stage"], r["rank"]) for r in rows] == [("old_log_prob", r) for r in range(4)] + \
        [("values", r) for r in range(4)]
    text = format_ranks(events, step=1)
    assert "nd_mesh:actor" in text and "old_log_prob" in text


def test_engine_passes_record_micro_batches_of_each_rank(tmp_path):
    """A traced call on a one-rank FSDP engine: one pass, its micro-batches, rows and tokens."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from minirl.trace.worker_trace import init_worker_tracer, worker_call
    from minirl.workers.engine import FSDPEngineWithLMHead

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                         num_key_value_heads=1, intermediate_size=64))
    engine = FSDPEngineWithLMHead({"module": model}, {"strategy": "fsdp2", "device": "cpu", "forward_only": True}, None)
    engine.initialize()
    ids = torch.randint(1, 50, (6, 7))
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # a left-padded prompt
    data = DataProto.from_dict({"input_ids": ids, "attention_mask": mask, "position_ids": mask.cumsum(-1) - 1,
                                "responses": ids[:, 4:], "response_mask": torch.ones(6, 3)},
                               meta_info={"micro_batch_size": 2, "temperature": 1.0})
    init_worker_tracer(tmp_path / "t", "fields", "r", rank=0)
    try:
        with worker_call({"method": "compute_log_prob", "rank": 0}, (data,)) as call:
            engine.infer_batch(data)
    finally:
        close_worker_tracer()
    (note,) = call["passes"]
    assert note["pass"] == "infer" and note["micro_batches"] == 3 and note["sizes"] == [2, 2, 2]
    assert note["tokens"] == [12, 14, 14] and note["response_tokens"] == [6, 6, 6]
    assert note["collectives"] == {} if "collectives" in note else True  # one rank: nothing to count
    assert engine.layout()["params"]["model.embed_tokens.weight"] == {"local": [50, 32], "global": [50, 32],
                                                                      "placements": "-"}


def test_compare_traces_sees_a_rank_that_cut_its_batch_differently(traced_group):
    tracer, wg, trace_dir = traced_group
    _run_stage(tracer, "old_log_prob", 1, wg.double)
    wg.close_trace()
    tracer.close()
    events = read_trace(trace_dir)
    assert compare_traces(events, events) == []
    changed = json.loads(json.dumps(events))
    next(e for e in changed if e.get("kind") == "worker" and e["rank"] == 2)["dp_rank"] = 0
    assert compare_traces(events, changed) == ["rank 2 call 0 (double): dp_rank 1 -> 0"]


def test_show_ranks_on_the_command_line(traced_group, capsys):
    tracer, wg, trace_dir = traced_group
    _run_stage(tracer, "update_actor", 1, wg.double)
    wg.close_trace()
    tracer.close()
    assert minirl.cli.main(["trace", "show", str(trace_dir), "--ranks", "--step", "1"]) == 0
    out = capsys.readouterr().out
    assert "update_actor" in out and "nd_mesh:actor" in out
    assert minirl.cli.main(["trace", "show", str(trace_dir), "--ranks", "--step", "7"]) == 2
    assert "no step 7" in capsys.readouterr().err


def test_a_worker_event_without_its_rank_is_not_a_trace(tmp_path):
    bad = tmp_path / "trace.jsonl"
    bad.write_text(json.dumps({"schema": 2, "run_id": "x", "kind": "worker", "seq": 0, "t": 1.0, "method": "m"}) + "\n")
    with pytest.raises(TraceFormatError, match="integer `rank`"):
        read_trace(bad)


def test_reference_fsdp_2rank_holds_both_ranks_with_half_the_rows_each():
    """The recorded 2-rank Ray run: each FSDP rank trained on half of every mini-batch, in its own micro-batches."""
    from minirl.trace.query import load

    events = load("fsdp_2rank")
    updates = [e for e in worker_events(events) if e["method"] == "update_actor"]
    assert sorted({e["rank"] for e in updates}) == [0, 1]
    for e in updates:
        assert e["dispatch"] == "nd_mesh:actor" and e["collected"] and e["dp_rank"] == e["rank"]
        for note in e["passes"]:  # the global mini-batch of 8 sequences, 4 per rank, micro-batches of 2
            assert note["sizes"] == [2, 2] and note["dp_size"] == 2 and note["global_batch_size"] == 8
            ops = {o["op"] for phase_ops in note["collectives"].values() for o in phase_ops}
            assert {"all_gather", "reduce_scatter"} <= ops  # FSDP2's shard traffic
    layouts = [lay for e in worker_events(events) for lay in e.get("engines", [])]
    assert {lay["coords"]["fsdp"] for lay in layouts} == {0, 1}
    emb = [lay["params"]["model.embed_tokens.weight"]["local"] for lay in layouts]
    assert sorted(emb) == [[129, 128], [130, 128]]  # 259 embedding rows split over 2 ranks
