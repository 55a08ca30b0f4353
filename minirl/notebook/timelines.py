"""Timelines the chapters draw from a run's trace or from rollout outputs: when sessions were generated and
scored (chapter 04), which weight version produced each part of a resumed response (chapter 08).

No verl counterpart (verl has no notebooks). Each function returns a `matplotlib.figure.Figure` built
without pyplot:

    from minirl.notebook import timelines
    timelines.scoring_timelines({"rule": rule_run.events, "reward model": rm_events})
    timelines.resumed_requests(outputs, version)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from matplotlib.figure import Figure

from minirl.trace.query import stage_events

__all__ = ["STAGE_COLORS", "resumed_requests", "score_intervals", "scoring_timelines"]

STAGE_COLORS = {"rollout": "#4c72b0", "sample": "#999999", "reward": "#dd8452"}
"""The trainer stages a scoring timeline shades, and the colour of the scoring bars of each."""


def score_intervals(events: list[dict], step: int = 1) -> tuple[list[tuple[float, float]], str]:
    """`([(score_start, score_end) per sample], stage)`: where the step's rewards were computed.

    From the `rollout` span's per-session timing when sessions were scored inside the rollout (rule,
    custom function), else from the `reward` span's per-sample timing (a colocated reward model).
    """
    evs = {e["stage"]: e for e in stage_events(events, step=step)}
    timing = evs["rollout"]["extra"]["session_timing"]
    if any(t["score_end"] > 0 for t in timing):
        return [(t["score_start"], t["score_end"]) for t in timing], "rollout"
    return [(t["score_start"], t["score_end"]) for t in evs["reward"]["extra"]["score_timing"]], "reward"


def scoring_timelines(runs: Mapping[str, list[dict]], step: int = 1) -> Figure:
    """One panel per run: each session's generation (grey) and scoring (coloured by the stage that scored it),
    over the trainer's shaded `rollout` / `sample` / `reward` spans; seconds since the rollout began."""
    fig = Figure(figsize=(9, 2.2 * len(runs)))
    axes = fig.subplots(len(runs), 1, squeeze=False)[:, 0]
    for ax, (name, events) in zip(axes, runs.items()):
        evs = {e["stage"]: e for e in stage_events(events, step=step)}
        t0 = evs["rollout"]["t_start"]
        for s, color in STAGE_COLORS.items():
            if s in evs:
                a, b = evs[s]["t_start"] - t0, evs[s]["t_start"] + evs[s]["wall_s"] - t0
                ax.axvspan(a, b, color=color, alpha=0.12)
                ax.text((a + b) / 2, -1.0, s, color=color, fontsize=8, ha="center")
        timing = evs["rollout"]["extra"]["session_timing"]
        for row, t in enumerate(timing):
            ax.barh(row, t["generate_sequences"], left=t["start"] - t0, color="#bbbbbb", height=0.7)
        intervals, where = score_intervals(events, step)
        for row, (a, b) in enumerate(intervals):
            ax.barh(row, max(b - a, 2e-4), left=a - t0, color=STAGE_COLORS[where], height=0.7)
        ax.set_title(f"{name}: scored in the {where} stage", fontsize=10)
        ax.set_ylabel("session")
        ax.set_ylim(len(timing), -2)
    axes[-1].set_xlabel("seconds since the rollout stage began")
    fig.tight_layout()
    return fig


def resumed_requests(outputs: Sequence, version: int) -> Figure:
    """One bar per request: the tokens generated before a mid-generation weight sync (version `version`) and
    after it (`version + 1`), read from each output's `extra_fields["resumed_at"]`."""
    fig = Figure(figsize=(9, 2.4))
    ax = fig.add_subplot()
    for i, o in enumerate(outputs):
        cut = (o.extra_fields["resumed_at"] or [len(o.token_ids)])[0]
        ax.barh(i, cut, color="tab:blue", label=f"version {version}" if i == 0 else None)
        ax.barh(i, len(o.token_ids) - cut, left=cut, color="tab:orange",
                label=f"version {version + 1}" if i == 0 else None)
    ax.set_xlabel("response tokens")
    ax.set_ylabel("request")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
