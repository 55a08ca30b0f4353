"""Two Ray nodes on one machine: `trainer.nnodes=2` places one FSDP rank on each, and they train like one rank.

A child process (this file, run as a script) starts a two-node Ray cluster on this machine with
`init_ray_local_cluster`: a head and a second raylet, both on 127.0.0.1, each with its own resources
(1 CPU and a custom resource `node_a` / `node_b`). It runs `minirl train trainer.nnodes=2
trainer.n_gpus_per_node=1`: the trainer reserves one placement group per node (`RayResourcePool`,
`process_on_nodes=[1, 1]`), and with one CPU per node the two groups cannot share a node. The child
reports where Ray put each group (`placement_group_table`), each node's resources, the sockets its
process tree listens on, and the step's metrics and rollout weights.

The test then checks: the two ranks ran on the two different nodes; every socket is on loopback; and
the step equals the same step on one rank in-process (the comparison of tests/e2e/test_trainer_ray.py:
PPO with a critic and a KL loss, same sampled batch, loss, grad norm and weights within 1e-5).
A child process because a Ray driver joins one cluster per process, and the test session's Ray
(`ray_session`) may already be up. docs/guide/multinode.md gives the same steps for two real machines.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
NODES = [{"num_cpus": 1, "resources": {"node_a": 1}}, {"num_cpus": 1, "resources": {"node_b": 1}}]


def _bound_sockets() -> list[list]:
    """(process name, ip, port) of every listening TCP / bound UDP socket of this process and its descendants."""
    import psutil

    me = psutil.Process()
    found = []
    for proc in [me, *me.children(recursive=True)]:
        try:
            for conn in proc.net_connections(kind="inet"):
                if (conn.type == socket.SOCK_DGRAM and conn.laddr) or conn.status == psutil.CONN_LISTEN:
                    found.append([proc.name(), conn.laddr.ip, conn.laddr.port])
        except psutil.Error:
            continue
    return found


def _child(out_dir: Path) -> None:
    """Start the two-node cluster, train one step on 2 ranks (one per node), write what happened."""
    import ray
    from test_trainer_ray import overrides, rollout_weights

    from minirl.config import load
    from minirl.single_controller.ray import init_ray_local_cluster, shutdown_ray
    from minirl.trainer.main_ppo import TaskRunnerV1

    init_ray_local_cluster(NODES)
    try:
        cfg = load([*overrides(out_dir, "two_nodes", 1), "trainer.nnodes=2"])
        trainer = TaskRunnerV1().build(cfg)
        try:
            trainer.fit()
            sockets = _bound_sockets()  # while the cluster and both rank processes are up
            torch.save(rollout_weights(trainer), out_dir / "weights.pt")
            report = {
                "nodes": [{"id": n["NodeID"], "ip": n["NodeManagerAddress"], "resources": n["Resources"]}
                          for n in ray.nodes() if n["Alive"]],
                "placement": [pg["bundles_to_node_id"] for pg in ray.util.placement_group_table().values()
                              if pg["state"] == "CREATED"],
                "world_size": trainer.actor_rollout_wg.world_size, "backend": trainer.worker_group_backend,
                "history": trainer.history[-1], "sockets": sockets}
        finally:
            trainer.close()
    finally:
        shutdown_ray()
    (out_dir / "report.json").write_text(json.dumps(report, default=str))


@pytest.mark.slow
def test_two_ray_nodes_on_loopback_place_one_fsdp_rank_each_and_train_like_one_rank(tmp_path):
    from test_trainer_ray import overrides, rollout_weights

    from minirl.config import load
    from minirl.trainer.main_ppo import TaskRunnerV1
    from minirl.utils.distributed import is_loopback

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests" / "e2e"),
                                                        os.environ.get("PYTHONPATH", "")])}
    child = subprocess.run([sys.executable, __file__, str(tmp_path)], env=env, capture_output=True, text=True, check=False,
                           timeout=600)
    assert child.returncode == 0, child.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())

    nodes = {n["id"]: n for n in report["nodes"]}
    assert len(nodes) == 2 and {n["ip"] for n in nodes.values()} == {"127.0.0.1"}
    assert sorted(k for n in nodes.values() for k in n["resources"] if k.startswith("node_")) == ["node_a", "node_b"]
    assert report["backend"] == "ray" and report["world_size"] == 2
    placed = [node for pg in report["placement"] for node in pg.values()]
    assert len(placed) == 2 and set(placed) == set(nodes)  # rank 0 on one node, rank 1 on the other
    assert report["sockets"] and all(is_loopback(ip) for _, ip, _ in report["sockets"]), report["sockets"]

    single = TaskRunnerV1().run(load(overrides(tmp_path, "one_rank", 1)))
    a, b = single.history[-1], report["history"]
    assert a["critic/score/mean"] == b["critic/score/mean"] and a["actor/grad_norm"] > 1e-3
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "critic/vf_loss", "critic/grad_norm"):
        assert b[key] == pytest.approx(a[key], abs=1e-5), key
    want, got = rollout_weights(single), torch.load(tmp_path / "weights.pt")
    for name, tensor in want.items():
        torch.testing.assert_close(got[name], tensor, atol=1e-5, rtol=0, msg=name)


if __name__ == "__main__":
    _child(Path(sys.argv[1]))
