"""How long each chapter and lab took to execute, against the < 60 s target ([P]).

    bash scripts/test.sh            # executes every notebook once (tests/notebooks/test_notebooks.py)
    python benchmarks/notebooks.py  # then: one row per notebook, slowest first

Reads the wall time the test run wrote into each executed copy's metadata
(`.cache/executed/<path>.ipynb`, entry `minirl_executed.wall_s`, docs/hooks/executed_notebooks.py).
Nothing is re-run here: the table describes the last test session on this machine, under whatever
load it had. The first notebook that needs the SFT warm start or the reward model also builds them
into `MINIRL_CACHE` (once per cache), so its time on an empty cache is not its time afterwards.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "executed"
TARGET_S = 60.0


def rows(cache: Path = CACHE) -> list[dict]:
    """One dict per executed copy under `cache`: source path, wall seconds, when it ran."""
    out = []
    for p in sorted(cache.rglob("*.ipynb")):
        meta = json.loads(p.read_text()).get("metadata", {}).get("minirl_executed", {})
        if "wall_s" in meta:
            source = meta.get("source", str(p.relative_to(cache)))
            if meta.get("mode") in ("reader", "solutions"):  # a lab runs twice: the reader's state, its solutions
                source += f" ({meta['mode']})"
            out.append({"source": source, "wall_s": float(meta["wall_s"]),
                        "executed_at": meta.get("executed_at", "?")})
    return sorted(out, key=lambda r: -r["wall_s"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=CACHE, help="folder of executed copies")
    ap.add_argument("--target", type=float, default=TARGET_S, help="seconds a notebook should take at most")
    args = ap.parse_args(argv)
    table = rows(args.cache)
    if not table:
        print(f"no executed notebooks under {args.cache}: run `bash scripts/test.sh` first", file=sys.stderr)
        return 2
    print(f"| notebook | wall s | vs {args.target:.0f} s | executed at |\n|---|---|---|---|")
    for r in table:
        mark = "ok" if r["wall_s"] < args.target else "over"
        print(f"| {r['source']} | {r['wall_s']:.1f} | {mark} | {r['executed_at']} |")
    over = sum(r["wall_s"] >= args.target for r in table)
    print(f"\n{len(table)} notebooks, {sum(r['wall_s'] for r in table):.0f} s in all, {over} over {args.target:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
