"""The checkpoint engine in one process: bucket packing, the naive and streaming engines, the manager.

Fast tests (no server process): `split_weight_chunks` / `merge_weight_chunks` round trips, the packing
rule `plan_buckets` shares with `send_weights`, the registry, the streaming engine between two gloo
members on two threads of this process (a `FileStore` rendezvous, sockets on 127.0.0.1), the manager's
naive sync with its debug faults, the load balancer and the client's resume of an aborted request,
and the config checks of the rollout placement. The same engine across real server processes is
tests/e2e/test_rollout_servers.py.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading

import pytest
import torch

from minirl.checkpoint_engine import (
    CheckpointEngineManager,
    CheckpointEngineRegistry,
    ColocatedCheckpointEngine,
    NCCLCheckpointEngine,
    bucket_size_bytes,
    merge_weight_chunks,
    plan_buckets,
    split_weight_chunks,
)
from minirl.checkpoint_engine.base import pack_buckets
from minirl.workers.rollout.base import SamplingParams, TokenOutput

KIB = 1024


def _weights():
    gen = torch.Generator().manual_seed(0)
    return [("a.weight", torch.randn(64, 64, generator=gen)),  # 16 KiB
            ("a.bias", torch.randn(64, generator=gen)),  # 256 B
            ("b.weight", torch.randn(3, 1000, generator=gen).to(torch.bfloat16)),  # 6000 B
            ("c.index", torch.arange(10, dtype=torch.int64)),  # 80 B
            ("d.big", torch.randn(100, 100, generator=gen))]  # 40000 B, larger than a 16 KiB bucket


@pytest.mark.parametrize("bucket", [16 * KIB, 64 * KIB, 1 << 30])
def test_split_then_merge_gives_back_every_tensor(bucket):
    weights = _weights()
    chunks = list(split_weight_chunks(iter(weights), bucket))
    assert all(meta.chunk_size <= bucket for meta, _ in chunks)
    merged = list(merge_weight_chunks(iter(chunks)))
    assert [n for n, _ in merged] == [n for n, _ in weights]
    for (_, got), (_, want) in zip(merged, weights):
        assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)


def test_a_tensor_larger_than_a_bucket_is_split_into_chunks_of_its_own():
    weights = _weights()
    bucket = 16 * KIB
    packed = list(pack_buckets(split_weight_chunks(iter(weights), bucket), bucket))
    assert all(length <= bucket for _, length in packed)
    big = [[m for m, _ in b if m.name == "d.big"] for b, _ in packed]
    assert sum(len(x) for x in big) == 3  # 40000 B in 16384-byte chunks: 16384 + 16384 + 7232
    assert [m.chunk_offset for x in big for m in x] == [0, 16384, 32768]


def test_plan_buckets_is_the_packing_the_engine_uses():
    weights = _weights()
    sizes = [(n, t.numel() * t.element_size()) for n, t in weights]
    for bucket in (300, 4 * KIB, 16 * KIB, 1 << 20):
        packed = list(pack_buckets(split_weight_chunks(iter(weights), bucket), bucket))
        plan = plan_buckets(sizes, bucket)
        assert [p["bytes"] for p in plan] == [length for _, length in packed]
        assert sum(p["bytes"] for p in plan) == sum(s for _, s in sizes)
    assert len(plan_buckets(sizes, 1 << 20)) == 1  # everything fits in one bucket


def test_bucket_size_is_megabytes_rounded_down_to_an_aligned_size():
    assert bucket_size_bytes(2048) == 2048 << 20  # verl: update_weights_bucket_megabytes << 20
    assert bucket_size_bytes(0.25) == 262144
    assert bucket_size_bytes(0.001) % 256 == 0
    with pytest.raises(ValueError, match="update_weights_bucket_megabytes=1e-07 gives an empty bucket"):
        bucket_size_bytes(1e-7)


def test_registry_names_the_backends_and_rejects_others():
    assert {"naive", "nccl"} <= set(CheckpointEngineRegistry.names())
    assert CheckpointEngineRegistry.get("naive") is ColocatedCheckpointEngine
    with pytest.raises(ValueError, match=r"backend='nixl' is not registered; minirl has \['naive', 'nccl'"):
        CheckpointEngineRegistry.get("nixl")


def test_naive_engine_hands_over_the_same_tensors():
    engine = ColocatedCheckpointEngine()
    weights = _weights()
    engine.send_weights(iter(weights))
    got = list(engine.receive_weights())
    assert all(a is b for (_, a), (_, b) in zip(got, weights))  # the same objects: nothing is copied
    with pytest.raises(RuntimeError, match="before send_weights"):
        list(engine.receive_weights())


def test_streaming_engine_broadcasts_buckets_between_two_gloo_members():
    """Rank 0 sends, rank 1 receives, each a thread of this process; 16 KiB buckets."""
    bucket = 16 * KIB
    sender, receiver = NCCLCheckpointEngine(bucket, is_master=True), NCCLCheckpointEngine(bucket)
    meta = [sender.prepare(), receiver.prepare()]
    actor_kw, rollout_kw = NCCLCheckpointEngine.build_topology(1, 1, meta)
    assert actor_kw["rank"] == [0] and rollout_kw["rank"] == [1] and rollout_kw["world_size"] == [2]
    joined = threading.Thread(target=receiver.init_process_group,
                              kwargs={k: v[0] for k, v in rollout_kw.items()})
    joined.start()
    sender.init_process_group(**{k: v[0] for k, v in actor_kw.items()})
    joined.join()
    weights, received = _weights(), []
    reader = threading.Thread(target=lambda: received.extend(receiver.receive_weights(global_steps=7)))
    reader.start()
    stats = sender.send_weights(iter(weights), global_steps=7)
    reader.join()
    total = sum(t.numel() * t.element_size() for _, t in weights)
    assert stats["bytes"] == total and stats["transport"] == "gloo" and stats["tensors"] == len(weights)
    sizes = [(n, t.numel() * t.element_size()) for n, t in weights]
    assert len(stats["buckets"]) == len(plan_buckets(sizes, bucket)) == receiver.last_receive["buckets"]
    assert receiver.last_receive["global_steps"] == 7
    for (name, got), (want_name, want) in zip(received, weights):
        assert name == want_name and torch.equal(got, want)
    sender.close()
    receiver.close()


def test_a_rank_outside_the_group_only_walks_the_generator():
    engine = NCCLCheckpointEngine(KIB)
    engine.init_process_group(rank=-1, world_size=3, master_metadata={})
    walked = []
    assert engine.send_weights((walked.append(n) or (n, t) for n, t in _weights())) == {}
    assert len(walked) == len(_weights())  # every all-gather still ran


# ---------------------------------------------------------------------------------- the manager


class _FakeActorGroup:
    """`get_per_tensor_param` of a one-rank actor group, with weights the test can change."""

    world_size = 1

    def __init__(self, model):
        self.model = model

    def get_per_tensor_param(self):
        return [[(k, v.detach().clone()) for k, v in self.model.state_dict().items()]]


@pytest.fixture(scope="module")
def tiny_model():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                        num_key_value_heads=1, intermediate_size=64, max_position_embeddings=64))


def _manager(model, **faults):
    from minirl.workers.rollout.hf_rollout import HFRollout
    from minirl.workers.rollout.replica import LocalReplica

    rollout = HFRollout({"seed": 0}, model)
    config = {"backend": "naive", "update_weights_bucket_megabytes": 2048, **faults}
    return CheckpointEngineManager(config, _FakeActorGroup(model), [LocalReplica(rollout)]), rollout


def _max_diff(model, rollout):
    theirs = dict(rollout.module.state_dict())
    return max(float((v - theirs[k]).abs().max()) for k, v in model.state_dict().items())


def test_naive_sync_loads_every_tensor_and_stamps_the_version(tiny_model):
    manager, rollout = _manager(tiny_model)
    with torch.no_grad():
        for p in tiny_model.parameters():
            p.add_(0.01)
    assert _max_diff(tiny_model, rollout) > 0
    out = manager.update_weights(3)
    assert _max_diff(tiny_model, rollout) == 0 and rollout.policy_version == 3
    n_bytes = sum(v.numel() * v.element_size() for v in tiny_model.state_dict().values())
    assert out["perf/update_weights_bytes"] == n_bytes and out["rollout/policy_version"] == 3
    assert [p["phase"] for p in out["phases"]] == ["resume_weights", "gather", "load", "resume_kv_cache"]
    assert manager.pop_metrics()["perf/update_weights_bytes"] == n_bytes and manager.pop_metrics() == {}


def test_debug_faults_skip_or_halve_a_sync(tiny_model):
    manager, rollout = _manager(tiny_model, debug_skip_sync_steps=[2], debug_partial_sync_steps=[3])
    assert manager.debug_faults
    manager.update_weights(1)
    with torch.no_grad():
        for p in tiny_model.parameters():
            p.add_(0.01)
    skipped = manager.update_weights(2)
    assert skipped["perf/update_weights_bytes"] == 0 and rollout.policy_version == 1  # stale weights, old version
    assert _max_diff(tiny_model, rollout) > 0
    partial = manager.update_weights(3)
    full = sum(v.numel() * v.element_size() for v in tiny_model.state_dict().values())
    assert 0 < partial["perf/update_weights_bytes"] < full and rollout.policy_version == 3  # new version, half-stale
    assert _max_diff(tiny_model, rollout) > 0
    assert _manager(tiny_model)[0].debug_faults is False  # never on by default


def test_the_manager_refuses_a_backend_that_does_not_fit_the_rollout(tiny_model):
    from minirl.workers.rollout.hf_rollout import HFRollout
    from minirl.workers.rollout.replica import LocalReplica

    with pytest.raises(ValueError, match="streams to rollout servers, but the rollout is in the controller"):
        CheckpointEngineManager({"backend": "nccl"}, _FakeActorGroup(tiny_model),
                                [LocalReplica(HFRollout({}, tiny_model))])


# ------------------------------------------------------------------------- balancer and client


def test_load_balancer_is_sticky_then_least_in_flight():
    from minirl.workers.rollout.llm_server import GlobalRequestLoadBalancer

    lb = GlobalRequestLoadBalancer({"s0": "h0", "s1": "h1"})
    assert lb.acquire_server("a") == ("s0", "h0")
    assert lb.acquire_server("b") == ("s1", "h1")  # s0 has one in flight
    assert lb.acquire_server("a") == ("s0", "h0")  # sticky, although s0 is busier now
    lb.release_server("s0")
    lb.release_server("s0")
    assert lb.acquire_server("c")[0] == "s0"
    assert lb.get_status()["requests"] == {"s0": 3, "s1": 1}


class _AbortingServer:
    """Answers a request's first call with 3 tokens and `aborted` (a sync came), the resumed call with the rest."""

    def __init__(self):
        self.calls = []

    async def generate(self, request_id, prompt_ids, sampling_params):
        self.calls.append((list(prompt_ids), sampling_params.max_tokens))
        if len(self.calls) == 1:
            return TokenOutput([7, 8, 9], [-0.1, -0.2, -0.3], "aborted", 4, {"global_steps": 4})
        return TokenOutput([10] * sampling_params.max_tokens, [-0.5] * sampling_params.max_tokens, "length", 5,
                           {"global_steps": 5})


def test_an_aborted_request_resumes_where_it_stopped_and_spans_two_versions():
    from minirl.workers.rollout.llm_server import GlobalRequestLoadBalancer, LLMServerClient

    server = _AbortingServer()
    client = LLMServerClient(GlobalRequestLoadBalancer({"s0": server}))
    out = asyncio.run(client.generate("r1", [1, 2], SamplingParams(max_tokens=6)))
    assert server.calls == [([1, 2], 6), ([1, 2, 7, 8, 9], 3)]  # prompt + partial output, remaining budget
    assert out.token_ids == [7, 8, 9, 10, 10, 10] and out.log_probs == [-0.1, -0.2, -0.3, -0.5, -0.5, -0.5]
    assert (out.extra_fields["min_global_steps"], out.extra_fields["max_global_steps"]) == (4, 5)
    assert out.extra_fields["num_resumes"] == 1 and out.stop_reason == "length" and client.resumed_requests == 1


def test_hf_rollout_stops_at_the_abort_and_keeps_what_it_generated(tiny_model):
    from minirl.workers.rollout.hf_rollout import HFRollout

    rollout = HFRollout({"seed": 0, "max_num_seqs": 2}, tiny_model)
    params = SamplingParams(max_tokens=20, ignore_eos=True, do_sample=False)
    full = rollout.generate([[1, 2, 3], [4, 5]], params)
    forward, calls = rollout._forward, []

    def forward_then_abort(*args, **kwargs):  # a server's abort arrives during the third model call
        calls.append(1)
        if len(calls) == 3:
            rollout.abort_event.set()
        return forward(*args, **kwargs)

    rollout._forward = forward_then_abort
    aborted = rollout.generate([[1, 2, 3], [4, 5], [6]], params)
    rollout.abort_event.clear()
    assert [o.stop_reason for o in aborted] == ["aborted"] * 3
    assert [len(o.token_ids) for o in aborted] == [3, 3, 0]  # first sub-batch: 3 tokens; second: never started
    assert [o.token_ids for o in aborted[:2]] == [o.token_ids[:3] for o in full]
    assert [o.log_probs for o in aborted[:2]] == [o.log_probs[:3] for o in full]


def test_the_server_answers_the_calls_left_after_an_abort_without_running_them():
    """A batch split into engine calls of `max_num_seqs`: an abort during the first call must not start the next
    one (it would generate while the trainer trains); its requests come back aborted and empty."""
    from dataclasses import asdict

    from minirl.workers.rollout.server import RolloutServer

    class SlowRollout:  # one long engine call that the abort stops
        max_num_seqs, policy_version = 2, 3

        def __init__(self):
            self.abort_event, self.started, self.calls = threading.Event(), threading.Event(), []

        def generate(self, prompts, params):
            self.calls.append(list(prompts))
            self.started.set()
            self.abort_event.wait(10)
            return [TokenOutput([1], [-0.1], "aborted", 3, {}) for _ in prompts]

    async def main():
        rollout = SlowRollout()
        server = RolloutServer({}, "", 0, "cpu", rollout=rollout)
        params = asdict(SamplingParams(max_tokens=4))
        batch = asyncio.ensure_future(server.generate_batch([(f"r{i}", [i], params) for i in range(4)]))
        while not rollout.started.is_set():
            await asyncio.sleep(0.005)
        aborted = await server.abort_all_requests()
        return rollout.calls, aborted, await batch

    calls, aborted, outs = asyncio.run(main())
    assert calls == [[[0], [1]]] and aborted["aborted_running"] == 2  # the second call never reached the engine
    assert [(o.token_ids, o.stop_reason) for o in outs] == [([1], "aborted")] * 2 + [([], "aborted")] * 2


# --------------------------------------------------------------------------------- config checks


def test_rollout_placement_config_problems_name_key_and_fix():
    from minirl.config import ConfigError, load
    from minirl.config.derived import num_replicas

    r = "actor_rollout_ref.rollout"
    cfg = load([f"{r}.nnodes=1", f"{r}.n_gpus_per_node=4", f"{r}.checkpoint_engine.backend=nccl"])
    assert num_replicas(cfg.actor_rollout_ref.rollout) == 4
    assert num_replicas(load([]).actor_rollout_ref.rollout, trainer_world_size=1) == 1
    for overrides, message in [
        ([f"{r}.nnodes=2", f"{r}.checkpoint_engine.backend=nccl"], "starts rollout servers on this machine only"),
        ([f"{r}.data_parallel_size=2"], "data_parallel_size=2: minirl's replica is one engine process"),
        ([f"{r}.tensor_model_parallel_size=2"], "the hf rollout has no tensor parallelism"),
        ([f"{r}.checkpoint_engine.debug_skip_sync_steps=[0]"], "a list of training steps >= 1"),
        ([f"{r}.checkpoint_engine.update_weights_bucket_megabytes=0"], "must be > 0"),
    ]:
        with pytest.raises(ConfigError, match=message):
            load(overrides)


def test_rendezvous_directory_is_removed_on_close():
    engine = NCCLCheckpointEngine(KIB, is_master=True)
    path = engine.prepare()["store_path"]
    assert os.path.isdir(os.path.dirname(path)) and os.path.dirname(path).startswith(tempfile.gettempdir())
    engine.close()
    assert not os.path.exists(os.path.dirname(path))
