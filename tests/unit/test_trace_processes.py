"""`minirl.trace.processes`: who ran what and when, from the spans and the `sample` spans' session records."""
from minirl.trace.processes import intersect_s, overlap_summary, process_activity, trained_sessions, union


def _stage(stage, step, t, wall, extra=None):
    return {"kind": "stage", "stage": stage, "step": step, "t_start": t, "wall_s": wall, "extra": extra or {}}


def _session(key, pid, start, gen, end, batch, v=0):
    return {"key": key, "pid": pid, "start": start, "gen_start": gen[0], "gen_end": gen[1], "end": end,
            "min_global_steps": v, "max_global_steps": v, "fetched_at": 1, "engine_batches": [batch]}


def test_intervals_merge_and_intersect():
    assert union([(3, 4), (0, 1), (0.5, 2)]) == [(0.0, 2.0), (3.0, 4.0)]
    assert intersect_s([(0, 2), (3, 4)], [(1, 3.5)]) == 1.5


def test_a_separate_run_has_three_processes_and_generation_overlapping_training():
    """Step 1 trains sessions a, b (server batch 1); the server computes batch 2 (step 2's) during step 1's update."""
    pids = {"controller": 10, "rollout_server_0": 20, "agent_loop_worker_0": 30}
    s1 = [_session("a_0_0", 30, 0.0, (0.1, 0.5), 0.6, [20, 1, 0.1, 0.5, 2, 0]),
          _session("b_0_0", 30, 0.0, (0.1, 0.5), 0.7, [20, 1, 0.1, 0.5, 2, 0])]
    s2 = [_session("c_0_0", 30, 0.8, (0.9, 1.4), 1.5, [20, 2, 0.9, 1.4, 1, 0])]
    events = [_stage("rollout", 1, 0.0, 0.01), _stage("sample", 1, 0.01, 0.7, {"session_timing": s1, "process_pids": pids}),
              _stage("old_log_prob", 1, 0.8, 0.2), _stage("update_actor", 1, 1.0, 0.5), _stage("update_weights", 1, 1.5, 0.1),
              _stage("sample", 2, 1.6, 0.1, {"session_timing": s2, "process_pids": pids}),
              _stage("update_actor", 2, 1.7, 0.5)]
    assert [s["key"] for s in trained_sessions(events)] == ["a_0_0", "b_0_0", "c_0_0"]
    rows = process_activity(events)
    assert [(r["kind"], r["pid"], r["role"]) for r in rows] == [
        ("generation", 20, "rollout_server_0"), ("agent_loop", 30, "agent_loop_worker_0"), ("training", 10, "controller")]
    assert rows[0]["intervals"] == [(0.1, 0.5, 0), (0.9, 1.4, 0)]  # each engine batch once
    summary = overlap_summary(events)
    assert summary["processes"] == 3 and not summary["generation in the controller"]
    assert abs(summary["generation while training s"] - 0.5) < 1e-9  # batch 2 (0.9-1.4) vs training (0.8-1.5)
    assert summary["sessions started before the previous step's update ended"] == 1  # c started at 0.8 < 1.5
    assert summary["generation ended during update_actor"] == 1  # c's last answer at 1.4, inside step 1's update
