"""How the doctor's findings read: the text `minirl doctor` prints, plain rows, and the faults x layers table.

No verl counterpart. One block per finding: the layer and what is wrong, the stage and steps where it
shows, every piece of evidence (value vs expected, and where it was read: metrics, trace, workers,
config), the verl code where the same failure would show (`verl/<path>.py:LINE`) and the minirl code.
"""

from __future__ import annotations

from minirl.doctor.findings import LAYERS, Finding

__all__ = ["confusion_rows", "format_confusion", "format_report", "layers_named", "rows"]


def _steps(steps: list[int]) -> str:
    if not steps:
        return "-"
    if steps == list(range(steps[0], steps[-1] + 1)) and len(steps) > 2:
        return f"{steps[0]}-{steps[-1]}"
    return ", ".join(map(str, steps))


def format_report(findings: list[Finding], record=None) -> str:
    """The text of `minirl doctor RUN`: a header line, then one block per finding (none for a healthy run)."""
    where = record.source if record is not None else "the run"
    head = f"minirl doctor {where}: "
    if record is not None:
        scope = f"steps {_steps(record.steps)}; {len(record.events)} trace events, metrics from {record.metrics_from}"
    else:
        scope = ""
    if not findings:
        return head + "no finding" + (f" ({scope})" if scope else "")
    lines = [head + f"{len(findings)} finding(s)" + (f" ({scope})" if scope else "")]
    for i, f in enumerate(findings, 1):
        lines += ["", f"{i}. [{f.layer}] {f.title}", f"   stage     {f.stage} (step {_steps(f.steps)})"]
        for j, e in enumerate(f.evidence):
            lines.append(("   evidence  " if j == 0 else "             ") + e.line())
        for j, (symbol, where_) in enumerate(f.verl):
            lines.append(("   verl      " if j == 0 else "             ") + f"{where_}  {symbol}")
        for j, name in enumerate(f.minirl):
            lines.append(("   minirl    " if j == 0 else "             ") + name)
    return "\n".join(lines)


def rows(findings: list[Finding]) -> list[dict]:
    """One row per finding (layer, check, stage, steps, first evidence, verl code) for `show_table`."""
    return [{"layer": f.layer, "check": f.check, "stage": f.stage, "steps": _steps(f.steps), "what": f.title,
             "evidence": f.evidence[0].line() if f.evidence else "-",
             "verl": "; ".join(where for _, where in f.verl)} for f in findings]


def layers_named(findings: list[Finding]) -> list[str]:
    """The layers the findings name, in `LAYERS` order, each once."""
    named = {f.layer for f in findings}
    return [layer for layer in LAYERS if layer in named]


def confusion_rows(results: dict, expected: dict) -> list[dict]:
    """Faults x layers: how many findings the doctor gave each layer for each run.

    `results` maps a run's name (a fault, or `clean`) to its findings; `expected` maps it to the layer
    the doctor should name (None: nothing). `ok` says whether exactly that layer (or nothing) was named.
    """
    out = []
    for name, findings in results.items():
        counts = {layer: sum(f.layer == layer for f in findings) for layer in LAYERS}
        want = expected.get(name)
        ok = layers_named(findings) == ([want] if want else [])
        out.append({"run": name, "expected": want or "-", **{k: (v or ".") for k, v in counts.items()},
                    "ok": "yes" if ok else "NO"})
    return out


def format_confusion(results: dict, expected: dict) -> str:
    """`confusion_rows` as a fixed-width text table (what the fault-injection test prints)."""
    table = confusion_rows(results, expected)
    cols = ["run", "expected", *LAYERS, "ok"]
    widths = {c: max(len(c), *(len(str(r[c])) for r in table)) for c in cols}
    line = "  ".join(c.ljust(widths[c]) for c in cols)
    body = ["  ".join(str(r[c]).ljust(widths[c]) for c in cols) for r in table]
    return "\n".join([line, "-" * len(line), *body])
