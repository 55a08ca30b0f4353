"""What the trace and the metrics say about a batch of tool-agent sessions.

Every `ToolAgentLoop` session leaves a record in `extra_fields["multi_turn"]` (turns with their
`[start, end)` response spans, token counts by role, mask spans, tool latencies, failures, how it
ended). `summarize_sessions` folds a rollout's records into the `multi_turn` entry of the `rollout`
(and `validate`) span's extras, and `multi_turn_metrics` flattens that into step metrics
(`multi_turn/tool_calls/mean`, `multi_turn/failures/<kind>`, ...).

verl has no such summary: its `ToolAgentLoop` times `generate_sequences` and `tool_calls` per
session (`AgentLoopMetrics`, `verl/experimental/agent_loop/agent_loop.py:79`) and the trainer reports
`training/num_turns/*`; tool failures only reach its logs.
"""

from __future__ import annotations

from collections import Counter

__all__ = ["multi_turn_metrics", "summarize_sessions"]

ROLES = ("assistant", "template", "observation")


def _mean(xs) -> float:
    xs = list(xs)
    return float(sum(xs) / len(xs)) if xs else 0.0


def summarize_sessions(records: list[dict], examples: int = 2) -> dict:
    """Totals and per-turn averages over session records; the first `examples` sessions' spans in full."""
    n = len(records)
    latencies = [x for r in records for x in r["tool_latency_s"]]
    failures, terminations = Counter(), Counter(r["termination"] for r in records)
    for r in records:
        failures.update(r["failures"])
    per_turn: dict[tuple[int, str], list[dict]] = {}
    for r in records:
        for t in r["turns"]:
            per_turn.setdefault((t["turn"], t["role"]), []).append(t)
    mismatches = [r["sanity_mismatch"] for r in records if r.get("sanity_mismatch")]
    return {
        "sessions": n,
        "tool_calls": sum(r["tool_calls"] for r in records),
        "sessions_with_tool_call": sum(r["tool_calls"] > 0 for r in records),
        "assistant_turns_mean": _mean(r["assistant_turns"] for r in records),
        "tokens_mean": {role: _mean(r["token_counts"][role] for r in records) for role in ROLES},
        "per_turn": [_turn_row(k, role, v) for (k, role), v in sorted(per_turn.items())],
        "tool_latency_s": {"mean": _mean(latencies), "max": max(latencies, default=0.0)},
        "failures": dict(sorted(failures.items())),
        "truncated_tool_responses": sum(r["truncated_tool_responses"] for r in records),
        "calls_ignored": sum(r["calls_ignored"] for r in records),
        "terminations": dict(sorted(terminations.items())),
        "sanity_mismatches": len(mismatches),
        "first_mismatch": mismatches[0]["message"] if mismatches else None,
        "examples": [{"mask_spans": r["mask_spans"], "turns": r["turns"]} for r in records[:examples]],
    }


def _turn_row(k: int, role: str, turns: list[dict]) -> dict:
    """Turn `k` over the sessions that reached it: how many, mean tokens, by token role for a tool turn."""
    row = {"turn": k, "role": role, "sessions": len(turns), "tokens_mean": _mean(t["end"] - t["start"] for t in turns)}
    if role == "tool":
        row["template_tokens_mean"] = _mean(t.get("template_tokens", 0) for t in turns)
        row["observation_tokens_mean"] = _mean(t.get("observation_tokens", 0) for t in turns)
        row["tool_s_mean"] = _mean(t.get("tool_s", 0.0) for t in turns)
    return row


def multi_turn_metrics(summary: dict | None, prefix: str = "multi_turn") -> dict[str, float]:
    """Step metrics from a summary: per-session means, rates and failure counts (empty without sessions)."""
    if not summary or not summary.get("sessions"):
        return {}
    n = summary["sessions"]
    m = {f"{prefix}/tool_calls/mean": summary["tool_calls"] / n,
         f"{prefix}/tool_call_rate": summary["sessions_with_tool_call"] / n,
         f"{prefix}/assistant_turns/mean": summary["assistant_turns_mean"],
         f"{prefix}/tool_latency_s/mean": summary["tool_latency_s"]["mean"],
         f"{prefix}/truncated_tool_responses": float(summary["truncated_tool_responses"]),
         f"{prefix}/sanity_mismatches": float(summary["sanity_mismatches"]),
         f"{prefix}/failures/total": float(sum(summary["failures"].values()))}
    m.update({f"{prefix}/tokens/{role}/mean": v for role, v in summary["tokens_mean"].items()})
    m.update({f"{prefix}/failures/{kind}": float(v) for kind, v in summary["failures"].items()})
    return m
