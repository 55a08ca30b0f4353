"""Glossary links at first use in the notebooks: list the terms a notebook uses before linking them, or link them.

    python scripts/glossary_links.py chapters/06_*.ipynb            # list: term, cell, context
    python scripts/glossary_links.py --fix chapters/06_*.ipynb      # link the first linkable use of each (then review the diff)

A term is a `docs/glossary.md` entry (its `{ #anchor }`); its first use in a notebook's markdown should link
to `../docs/glossary.md#anchor` (the site hook points such links at the glossary page). Matching is by
pattern, so `--fix` can pick a word in another sense ("returns a dict", a table of *values*): read the diff.
Headings, tables, math, links, HTML and the collapsed `<details>` block are never rewritten; a code span
that is exactly the term (`` `uid` ``) becomes a linked code span.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

GLOSSARY = "../docs/glossary.md"
# anchor -> pattern of the term's uses (upper-case acronyms match case-sensitively)
TERMS = [
    ("policy", r"\bpolic(?:y|ies)\b"), ("actor", r"\bactor\b"), ("rollout", r"\brollout\b(?!\.n)"),
    ("session", r"\bsessions?\b"), ("agentloop", r"\bAgentLoop\b|\bagent loop\b"), ("reward", r"\brewards?\b"),
    ("token_level_rewards", r"token_level_rewards"), ("return", r"\breturns?\b"), ("value", r"\bcritic\b|\bvalues?\b"),
    ("advantage", r"\badvantages?\b"), ("gae", r"\bGAE\b"), ("grpo", r"\bGRPO\b"), ("ppo", r"\bPPO\b"),
    ("log-prob", r"\blog-probs?\b|log_probs?\b"), ("ratio", r"\bratios?\b"), ("reference", r"\breference\b"),
    ("kl", r"\bKL\b"), ("loss-aggregation", r"loss_agg_mode|loss aggregation"),
    ("on-policy", r"\boff-policy\b|\bstale(?:ness)?\b"), ("sft", r"\bSFT\b"), ("dataproto", r"\bDataProto\b"),
    ("tensordict", r"\bTensorDict\b"), ("transferqueue", r"\bTransferQueue\b"), ("kvbatchmeta", r"\bKVBatchMeta\b"),
    ("nested", r"\bnested\b"), ("uid", r"\buid\b"), ("response_mask", r"response_mask"),
    ("attention_mask", r"attention_mask"), ("rollout-n", r"rollout\.n\b"), ("ppo_mini_batch_size", r"ppo_mini_batch_size"),
    ("ppo_micro_batch_size_per_gpu", r"micro-batch(?:es)?|ppo_micro_batch_size\w*"),
    ("single-controller", r"single controller|single-controller"), ("worker-group", r"worker groups?|resource pools?"),
    ("dispatch", r"\bdispatch"), ("balance-batch", r"balance_batch|balanc(?:e|ed|ing) batch"), ("fsdp", r"\bFSDP\b"),
    ("hybrid-engine", r"hybrid engine"), ("weight-sync", r"weight sync"), ("replay-buffer", r"replay buffer|ReplayBuffer"),
    ("trace", r"\btraces?\b"), ("rlhf", r"\bRLHF\b"), ("rlvr", r"\bRLVR\b"), ("dpo", r"\bDPO\b"), ("opd", r"\bOPD\b"),
]
CASE_SENSITIVE = {"grpo", "ppo", "gae", "kl", "sft", "fsdp", "rlhf", "rlvr", "dpo", "opd"}
PROTECTED = [(r"\[[^\]]*\]\([^)]*\)", 0), (r"\$\$.*?\$\$", re.DOTALL), (r"\$[^$\n]*\$", 0), (r"<[^>\n]+>", 0),
             (r"^#.*$", re.MULTILINE), (r"\*\*The question\.\*\*", 0), (r"^\|.*\|$", re.MULTILINE), (r"<details>.*?</details>", re.DOTALL)]


def _protected(s: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for rx, fl in PROTECTED for m in re.finditer(rx, s, flags=fl)]


def first_use(s: str, pattern: str, flags: int):
    """(start, end, replacement) of the first linkable use of the term in `s`, or None."""
    prot = _protected(s)
    for m in re.finditer(pattern, s, flags=flags):
        if any(a <= m.start() < b for a, b in prot):
            continue
        before = s[:m.start()]
        if before.count("`") % 2:  # inside a code span: link the span if it is short and not already linked
            a, b = before.rfind("`"), s.find("`", m.end())
            span = s[a:b + 1]
            if b > 0 and re.fullmatch(r"`[^`\n]+`", span) and s[a - 1:a] != "[" and len(span) < 40:
                return a, b + 1, span
            continue
        return m.start(), m.end(), m.group(0)
    return None


def process(path: Path, fix: bool) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    cells = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "markdown"]
    report = []
    for anchor, pattern in TERMS:
        flags = 0 if anchor in CASE_SENSITIVE else re.IGNORECASE
        for i, c in cells:
            if f"glossary.md#{anchor})" in c.source:
                break
            hit = first_use(c.source, pattern, flags)
            if hit is None:
                continue
            a, b, text = hit
            report.append(f"{path}: cell {i}: {text!r} -> #{anchor}")
            if fix:
                c.source = c.source[:a] + f"[{text}]({GLOSSARY}#{anchor})" + c.source[b:]
            break
    if fix and report:
        nbformat.write(nb, path)
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fix", action="store_true", help="link each first use (review the diff afterwards)")
    ap.add_argument("notebooks", nargs="+", type=Path)
    args = ap.parse_args(argv)
    lines = [line for p in args.notebooks for line in process(p, args.fix)]
    print("\n".join(lines) if lines else "every glossary term is linked at its first linkable use")
    return 0


if __name__ == "__main__":
    sys.exit(main())
