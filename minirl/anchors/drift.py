"""Where each verl symbol minirl cites sits at 9c38b8bb1876, at the pin, and in a newer checkout.

verl moves fast: between 9c38b8bb1876 (2026-05-26, the revision older reading guides cite) and the pin
1dda039b9c63 (2026-08-22) the V1 trainer left `main_ppo_sync.py` (in `verl/trainer/`) for
`verl/trainer/ppo/v1/`. `minirl anchors drift` takes every `verl/<file>.py:LINE` the project cites, finds
the symbol at that line in the pinned index (the backticked name before the citation picks among
several), and looks the same qualified name up in the other indexes:

- same file: its line there (and the shift from the pin, `+3`);
- another file defines it: that file and line (when several do, the one whose path shares most
  folders with the pin's, and how many others there are);
- nowhere: `gone`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from minirl.anchors import Index, iter_citations


@dataclass(frozen=True)
class Symbol:
    """A cited symbol as it is at the pin: file, qualified name, def line."""

    path: str
    qualname: str
    line: int


@dataclass(frozen=True)
class Location:
    """Where a symbol is in another index: `status` is same, moved or gone."""

    status: str
    path: str | None = None
    line: int | None = None
    others: int = 0  # further files that define the same qualified name


def cited_symbols(files, pin: Index) -> list[Symbol]:
    """The distinct symbols that the citations in `files` point at, resolved in the pinned index."""
    found = set()
    for f in files:
        for c in iter_citations(Path(f).read_text(errors="ignore")):
            quals = pin.symbols.get(c.path, {}).get(c.line) if c.line else None
            if not quals:
                continue  # not a symbol citation (or unresolved: `minirl anchors check` reports it)
            qual = quals[0]
            if c.name:
                last = c.name.split(".")[-1]
                qual = next((q for q in quals if q == c.name or q.split(".")[-1] == last), qual)
            found.add(Symbol(c.path, qual, c.line))
    return sorted(found, key=lambda s: (s.path, s.line, s.qualname))


def locate(index: Index, path: str, qualname: str) -> Location:
    """Find `qualname` in `index`: in `path` first, else in any other file."""
    if qualname in index.by_name.get(path, {}):
        return Location("same", path, index.by_name[path][qualname])
    hits = [(p, names[qualname]) for p, names in index.by_name.items() if qualname in names]
    if not hits:
        return Location("gone")
    parts = path.split("/")

    def shared(p):
        return len(os.path.commonprefix([p.split("/"), parts]))

    best = max(hits, key=lambda h: (shared(h[0]), h[0]))
    return Location("moved", best[0], best[1], len(hits) - 1)


def describe(loc: Location, pin_line: int, moved_word: str) -> str:
    """One table cell: `268`, `270 (+2)`, `<moved_word> verl/<file>.py:40`, `gone`."""
    if loc.status == "gone":
        return "gone"
    if loc.status == "same":
        delta = loc.line - pin_line
        return f"{loc.line}" + (f" ({delta:+d})" if delta else "")
    more = f" (+{loc.others} more)" if loc.others else ""
    return f"{moved_word} {loc.path}:{loc.line}{more}"


def drift_table(symbols: list[Symbol], old: Index, pin: Index, new: Index | None = None) -> str:
    """The report `minirl anchors drift` prints: one row per symbol, grouped by the pinned file."""
    head = ["symbol (file at the pin)", f"at {old.label}", f"at {pin.label} (pin)"]
    if new is not None:
        head.append(f"in {new.label}")
    rows, tally = [], {}
    current = None
    for s in symbols:
        if s.path != current:
            rows.append([s.path])
            current = s.path
        o = locate(old, s.path, s.qualname)
        row = ["  " + s.qualname, describe(o, s.line, "in"), str(s.line)]
        tally.setdefault("old", []).append(o.status)
        if new is not None:
            n = locate(new, s.path, s.qualname)
            row.append(describe(n, s.line, "moved to"))
            tally.setdefault("new", []).append(n.status)
        rows.append(row)
    widths = [max(len(r[i]) for r in [head] + rows if len(r) > i) for i in range(len(head))]
    widths[0] = max(len(r[0]) for r in [head] + rows if len(r) > 1)

    def fmt(r):
        if len(r) == 1:
            return r[0]
        return "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()

    out = [fmt(head)] + [fmt(r) for r in rows]
    for key, label in (("old", old.label), ("new", new.label if new is not None else "")):
        if key in tally:
            st = tally[key]
            out.append(f"{len(st)} symbols vs {label}: {st.count('same')} in the same file, "
                       f"{st.count('moved')} in another file, {st.count('gone')} gone")
    return "\n".join(out)

