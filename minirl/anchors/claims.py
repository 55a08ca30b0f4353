r"""Claims about verl a machine can check: config defaults and metric names, against verl's index at the pin.

Two kinds of statement in the chapters, labs and docs can be checked without reading verl's code, because
the index (`minirl/anchors/data/1dda039b9c63/`) lists every leaf of verl's composed trainer config with its
default (`verl_config_defaults.tsv`, from `verl/trainer/config/_generated_ppo_trainer.yaml`, plus
`verl_config_defaults_extra.tsv` for the 14 leaves that file's index leaves out: lists and the quoted key
`'n'`) and every metric name verl writes as a literal (`verl_metric_keys.tsv`, plus
`verl_metric_keys_runtime.tsv` for names verl builds at run time from a prefix, each with the `def` line
of the function that builds it).

**The convention.** A verl default is stated as ``verl's default `KEY=VALUE` `` (several:
``verl's defaults `A=1`, `B=2` ``), or ``` `KEY=VALUE` (verl's default) ```. `KEY` is a key of verl's composed
config, in full or as a suffix that names one key (`rollout.n`); `VALUE` as YAML writes it (`true`,
`1e-06`, `token-mean`). A default of a verl Python argument, not a config key, is written
``verl's default `Symbol(arg=VALUE)` `` and must be one of `VERIFIED_ARGUMENT_DEFAULTS`. Any other
sentence that says "default" and "verl" is reported as an unchecked statement of a verl default
(`unmarked_default_statements`): rewrite it in the convention, or make clear the default is minirl's.

A metric name in backticks (`training/rollout_probs_diff_mean`, `critic/score/*`,
`timing_s/update_weights_{gather,load}`) counts as attributed to verl unless its sentence says
"minirl"; it must then be a metric verl writes at the pin. A metric only minirl logs is labelled in its
sentence ("minirl's own `...`", "minirl logs `...`") and must exist in minirl's source.

`tests/unit/test_verl_claims.py` runs every check over chapters/, labs/, docs/ and the READMEs, and compares
minirl's own defaults with verl's for the keys both have (`default_differences`, listed with their
reasons in `docs/guide/defaults.md`).
"""

from __future__ import annotations

import csv
import itertools
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from minirl.anchors import DATA, PIN

ROOT = Path(__file__).resolve().parents[2]

__all__ = ["METRIC_PREFIXES", "VERIFIED_ARGUMENT_DEFAULTS", "Problem", "VerlDefaults", "check_default_claims",
           "check_metric_mentions", "check_texts", "claim_texts", "default_claims", "default_differences", "metric_mentions",
           "minirl_metric_names", "sentences", "unmarked_default_statements", "verl_defaults", "verl_metric_names"]

VERIFIED_ARGUMENT_DEFAULTS = {
    "RayResourcePool(max_colocate_count)": ("10", "verl/single_controller/ray/base.py:113"),
    "RayResourcePool(use_gpu)": ("True", "verl/single_controller/ray/base.py:113"),
    "ResourcePoolManager(max_colocate_count)": ("3", "verl/single_controller/ray/base.py:185"),
    "ResourcePool(max_colocate_count)": ("10", "verl/single_controller/base/worker_group.py:27"),
}
"""Defaults of verl Python arguments (not config keys) that the texts state, each read at the pin; the
citation is the class or function's `def` line (`tests/unit/test_verl_claims.py` checks that it resolves)."""

METRIC_PREFIXES = frozenset({
    "actor", "critic", "training", "timing_s", "timing_per_token_ms", "perf", "response_length",
    "prompt_length", "response", "num_turns", "val-core", "val-aux", "val", "global_seqlen", "agent_loop",
    "fully_async", "rollout_corr", "separate_async", "reward", "rollout", "version", "multi_turn", "sft",
})
"""First path segments that make a backticked `a/b` a metric name (verl's and minirl's)."""


NOT_SCANNED = {"docs/guide/defaults.md": "its table of defaults is checked row by row against both configs "
                                         "(default_differences); its prose shows the convention with placeholders"}
"""Texts the prose checks skip, each with the reason."""


@dataclass
class Problem:
    """One claim that does not hold, where it stands and what to do."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


# ------------------------------------------------------------------------------------------- texts

_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def _code_comments(src: str) -> str:
    lines = []
    for line in src.splitlines():
        m = re.search(r"(?<![\"'\w])#\s(.*)$", line)
        if m:
            lines.append(m.group(1))
    return "\n".join(lines)


def claim_texts(root: Path = ROOT) -> list[tuple[str, str]]:
    """`(label, text)` for every text the checks read: notebook markdown cells and code comments
    (chapters/, labs/), lab solution comments, docs/**/*.md and the READMEs."""
    out = []
    for nb_path in sorted(root.glob("chapters/*.ipynb")) + sorted(root.glob("labs/*.ipynb")):
        nb = json.loads(nb_path.read_text())
        rel = nb_path.relative_to(root).as_posix()
        for cell in nb["cells"]:
            src = "".join(cell["source"])
            if cell["cell_type"] == "markdown":
                out.append((f"{rel}#{cell.get('id')}", src))
            elif cell["cell_type"] == "code" and _code_comments(src):
                out.append((f"{rel}#{cell.get('id')} (code comments)", _code_comments(src)))
    for py in sorted(root.glob("labs/solutions/*.py")):
        out.append((f"{py.relative_to(root).as_posix()} (comments)", _code_comments(py.read_text())))
    mds = sorted(root.glob("docs/**/*.md")) + [root / "README.md", root / "chapters/README.md", root / "labs/README.md"]
    for md in mds:
        if md.is_file() and md.relative_to(root).as_posix() not in NOT_SCANNED:
            out.append((md.relative_to(root).as_posix(), md.read_text()))
    return out


def sentences(text: str) -> list[str]:
    """The sentences of a markdown text, fenced code blocks left out; a table row or a list item ends a
    sentence, and so do `.`, `;`, `!` and `?` followed by white space."""
    text = _FENCE.sub("\n", text)
    out = []
    for block in re.split(r"\n\s*\n|\n(?=\s*(?:[-*+] |\d+\. |\|))", text):
        for sent in re.split(r"(?<=[.;!?])\s+(?=\S)", block):
            sent = " ".join(sent.split())
            if sent:
                out.append(sent)
    return out


# ------------------------------------------------------------------------------------ config defaults

@dataclass
class VerlDefaults:
    """verl's composed trainer config at the pin: `key -> (default as written, file:line)`."""

    raw: dict = field(default_factory=dict)

    def keys_for(self, key: str) -> list[str]:
        """The full keys `key` names: itself, or every key it is a dotted suffix of."""
        if key in self.raw:
            return [key]
        return [k for k in self.raw if k.endswith("." + key)]

    def resolved(self, key: str, _depth: int = 0) -> str:
        """The default with verl's interpolations followed (`${oc.select:X,d}`, `${X}`, `${.sibling}`)."""
        value = self.raw[key][0]
        m = re.fullmatch(r"\$\{(?:oc\.select:)?([^,}]+)(?:,([^}]*))?\}", value.strip())
        if not m or _depth > 8:
            return value
        target, fallback = m.group(1).strip(), m.group(2)
        if target.startswith("."):
            target = key.rsplit(".", 1)[0] + target
        if target in self.raw:
            return self.resolved(target, _depth + 1)
        return fallback.strip() if fallback is not None else value


@lru_cache(maxsize=1)
def verl_defaults() -> VerlDefaults:
    """Read `verl_config_defaults.tsv` and its `_extra` supplement (first row per key wins)."""
    raw = {}
    for name in ("verl_config_defaults.tsv", "verl_config_defaults_extra.tsv"):
        with open(DATA / PIN / name, newline="") as f:
            rows = csv.reader(f, delimiter="\t")
            next(rows)
            for key, default, where in rows:
                raw.setdefault(key, (default, where))
    return VerlDefaults(raw)


def _scalar(value: str):
    """A YAML scalar as written (`true`, `1.0e-06`, `null`, `[a, b]`) -> a comparable Python value."""
    v = value.strip().strip("'\"")
    low = v.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "none", "~"):
        return None
    try:
        return float(v)
    except ValueError:
        pass
    if v.startswith("[") and v.endswith("]"):
        return tuple(_scalar(x) for x in v[1:-1].split(",") if x.strip())
    return v


def same_value(a, b) -> bool:
    """Two defaults written differently but equal (`1e-6` and `1.0e-06`, `True` and `true`)."""
    x, y = (_scalar(str(v)) if not isinstance(v, (list, tuple)) else tuple(_scalar(str(i)) for i in v)
            for v in (a, b))
    return x == y


_ITEM = r"`[^`]+`"
_CLAIM_AFTER = re.compile(rf"\bverl(?:'s)?\s+defaults?\s*(?:is\s+|are\s+|of\s+|:\s*)?((?:{_ITEM}(?:\s*,\s*|\s+and\s+|\s+)?)+)")
_CLAIM_BEFORE = re.compile(rf"({_ITEM})\s*(?:\(|,|—)?\s*verl(?:'s)?\s+default\b")


@dataclass
class DefaultClaim:
    """One stated verl default: `key=value` (config) or `Symbol(arg=value)` (argument)."""

    text: str
    key: str
    value: str
    argument: bool = False


def default_claims(sentence: str) -> list[DefaultClaim]:
    """The verl defaults a sentence states in the convention (see the module docstring)."""
    items = []
    for m in _CLAIM_AFTER.finditer(sentence):
        items += re.findall(_ITEM, m.group(1))
    for m in _CLAIM_BEFORE.finditer(sentence):
        items.append(m.group(1))
    claims = []
    for item in dict.fromkeys(items):
        body = item.strip("`")
        arg = re.fullmatch(r"([A-Za-z_][\w.]*)\((\w+)=([^)]*)\)", body)
        if arg:
            claims.append(DefaultClaim(item, f"{arg.group(1)}({arg.group(2)})", arg.group(3), argument=True))
        elif "=" in body:
            key, value = body.split("=", 1)
            claims.append(DefaultClaim(item, key.strip(), value.strip()))
    return claims


def check_default_claims(sentence: str, where: str, defaults: VerlDefaults | None = None) -> list[Problem]:
    """Every default the sentence states in the convention, compared with verl's index."""
    defaults = defaults or verl_defaults()
    problems = []
    for c in default_claims(sentence):
        if c.argument:
            known = VERIFIED_ARGUMENT_DEFAULTS.get(c.key)
            if known is None:
                problems.append(Problem(where, f"{c.text}: not a verified verl argument default; read it at the pin "
                                               "and add it to minirl.anchors.claims.VERIFIED_ARGUMENT_DEFAULTS"))
            elif not same_value(known[0], c.value):
                problems.append(Problem(where, f"{c.text}: verl's default is {known[0]} ({known[1]})"))
            continue
        keys = defaults.keys_for(c.key)
        if not keys:
            problems.append(Problem(where, f"{c.text}: `{c.key}` is not a key of verl's composed config at the pin"))
            continue
        values = {k: (defaults.raw[k][0], defaults.resolved(k)) for k in keys}
        wrong = {k: v for k, v in values.items() if not (same_value(v[0], c.value) or same_value(v[1], c.value))}
        if wrong and len(keys) > 1 and len(wrong) < len(keys):
            problems.append(Problem(where, f"{c.text}: `{c.key}` names {len(keys)} keys with different defaults "
                                           f"({', '.join(sorted(keys))}); write the full key"))
        elif wrong:
            k = min(wrong)
            raw, res = values[k]
            shown = raw if raw == res else f"{raw} (= {res})"
            problems.append(Problem(where, f"{c.text}: verl's default `{k}` is `{shown}` "
                                           f"({defaults.raw[k][1]}), not `{c.value}`"))
    return problems


_DEFAULT_WORD = re.compile(r"\bdefault(?:s|ed)?\b", re.IGNORECASE)
_GENERIC = re.compile(r"defaults list|anything but (?:verl's |their |its )?default|(?:to|at) (?:their|its) defaults?\b",
                      re.IGNORECASE)


def unmarked_default_statements(sentence: str) -> bool:
    """True for a sentence that speaks of a particular verl default without stating it in the convention.

    A default word is about verl when `verl` stands in the five words before it ("verl's default",
    "verl defaults to"), when "at the pin" / "pinned commit" follows it, or when a number or a code span
    follows it in a sentence that names verl and not minirl ("`reward.num_workers`, default 8").
    Generic uses ("the defaults list", "anything but verl's default") are not statements of a value."""
    bare = _GENERIC.sub(" ", re.sub(r"`[^`]*`", "`…`", sentence))
    if not re.search(r"\bverl\b|\bat the pin", bare, re.IGNORECASE):
        return False
    names_minirl = re.search(r"\bminirl\b", bare, re.IGNORECASE)
    value = re.compile(r"`…`|\d")

    def about_verl(m: re.Match) -> bool:
        before, after = bare[:m.start()].split()[-5:], bare[m.end():].split()[:3]
        if after and after[0] in ("to", "is", "of"):
            after = after[1:]
        owner_verl = any(re.match(r"\(?verl(?:'s)?\b", w, re.IGNORECASE) for w in before)
        at_pin = re.match(r"\s*at the pin", bare[m.end():])
        value_follows = not names_minirl and bool(after) and bool(value.match(after[0]))
        return bool(owner_verl or at_pin or value_follows)

    return any(about_verl(m) for m in _DEFAULT_WORD.finditer(bare)) and not default_claims(sentence)


# --------------------------------------------------------------------------------------------- metrics

_METRIC = re.compile(r"`([a-z][\w@-]*(?:/[\w@{}.,*|-]+)+)`")
_FILE = re.compile(r"\.(?:py|md|yaml|yml|ipynb|sh|json|jsonl|txt|parquet|pt|tsv)\b")


def metric_mentions(sentence: str) -> list[str]:
    """The metric names a sentence writes in backticks (first segment in `METRIC_PREFIXES`)."""
    out = []
    for m in _METRIC.finditer(sentence):
        name = m.group(1)
        if _FILE.search(name) or name.split("/", 1)[0] not in METRIC_PREFIXES:
            continue
        out.append(name)
    return out


def _expand(name: str) -> list[str]:
    """`a/{x,y}/z` -> `a/x/z`, `a/y/z`; `a/b|c` -> `a/b`, `a/c` (per segment)."""
    parts = []
    for seg in name.split("/"):
        m = re.fullmatch(r"(.*)\{([^}]*,[^}]*)\}(.*)", seg)
        if m:
            parts.append([m.group(1) + alt + m.group(3) for alt in m.group(2).split(",")])
        else:
            parts.append(seg.split("|"))
    return ["/".join(p) for p in itertools.product(*parts)]


def _as_regex(name: str) -> re.Pattern:
    """A mention or a key template as a regex: `*` and `{field}` match one or more characters."""
    out = ""
    for piece in re.split(r"(\*|\{[^}]*\})", name):
        out += ".+" if piece == "*" or (piece.startswith("{") and piece.endswith("}")) else re.escape(piece)
    return re.compile(out + r"\Z")


@lru_cache(maxsize=1)
def verl_metric_names() -> frozenset[str]:
    """Metric names verl writes at the pin: the literals of `verl_metric_keys.tsv` (templates such as
    `timing_s/{name}` left out: they say nothing about a particular name) and the verified run-time names
    of `verl_metric_keys_runtime.tsv`."""
    names = set()
    with open(DATA / PIN / "verl_metric_keys.tsv", newline="") as f:
        rows = csv.reader(f, delimiter="\t")
        next(rows)
        names |= {key for key, kind, *_ in rows if kind == "literal" and not key.endswith("/")}
    with open(DATA / PIN / "verl_metric_keys_runtime.tsv", newline="") as f:
        rows = csv.reader(f, delimiter="\t")
        next(rows)
        names |= {row[0] for row in rows}
    return frozenset(names)


def verl_runtime_metric_rows() -> list[tuple[str, str, str]]:
    """`(metric, how verl builds it, citation)` rows of `verl_metric_keys_runtime.tsv`."""
    with open(DATA / PIN / "verl_metric_keys_runtime.tsv", newline="") as f:
        rows = csv.reader(f, delimiter="\t")
        next(rows)
        return [tuple(r) for r in rows]


@lru_cache(maxsize=1)
def minirl_metric_names(root: Path = ROOT) -> tuple[frozenset[str], tuple[str, ...]]:
    """Metric names minirl's source writes: string literals (`"reward/failures"`) and f-string templates
    (`f"reward/{key}/mean"`) whose first segment is in `METRIC_PREFIXES`."""
    literals, templates = set(), []
    lit = re.compile(r"""(f?)["']([a-z{][\w@{}-]*/[\w@{}./-]*)["']""")
    for py in (root / "minirl").rglob("*.py"):
        source = py.read_text()
        prefixes = re.findall(r"""\bprefix(?::\s*str)?\s*=\s*["']([a-z][\w/-]*)["']""", source)
        for is_f, s in lit.findall(source):
            if is_f and s.startswith("{prefix}/"):  # f"{prefix}/x" with `prefix="multi_turn"` as the default
                templates += [p + s[len("{prefix}"):] for p in prefixes]
                continue
            if s.split("/", 1)[0] not in METRIC_PREFIXES or _FILE.search(s):
                continue
            if is_f and "{" in s:
                templates.append(s)
            elif not s.endswith("/"):
                literals.add(s)
    return frozenset(literals), tuple(templates)


def _matches(mention: str, names, templates=()) -> bool:
    """Every expansion of `mention` names at least one of `names`, or fits one of `templates`."""
    def fits(one: str, template: str) -> bool:
        sample = re.sub(r"\{[^}]*\}", "x", template)
        return bool(_as_regex(one).match(sample) or _as_regex(template).match(one.replace("*", "x")))

    for one in _expand(mention):
        rx = _as_regex(one)
        if not (any(rx.match(n) for n in names) or any(fits(one, t) for t in templates)):
            return False
    return True


def check_metric_mentions(sentence: str, where: str) -> list[Problem]:
    """Each metric name the sentence mentions: verl's, or labelled as minirl's and really minirl's."""
    problems = []
    labelled = re.search(r"\bminirl\b", sentence, re.IGNORECASE)  # "minirl's", "minirl logs", `minirl/...`
    verl = verl_metric_names()
    mine, templates = minirl_metric_names()
    for name in metric_mentions(sentence):
        if _matches(name, verl):
            continue
        ours = _matches(name, mine, templates)
        if ours and labelled:
            continue
        if ours:
            problems.append(Problem(where, f"`{name}` is minirl's metric, not one verl writes at the pin: say so "
                                           f"in the sentence (\"minirl's own `{name}`\") or name verl's metric"))
        else:
            problems.append(Problem(where, f"`{name}` is a metric neither verl (at the pin) nor minirl writes; "
                                           "fix the name (a name verl builds at run time belongs in "
                                           "verl_metric_keys_runtime.tsv, with the def line that builds it)"))
    return problems


# --------------------------------------------------------------------------- minirl's defaults vs verl's

def _flatten(tree, prefix=""):
    for k, v in tree.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and v:
            yield from _flatten(v, key)
        else:
            yield key, v


def yaml_scalar(value) -> str:
    """A Python value as YAML writes it in a table cell (`true`, `null`, `[a, b]`, `1.0e-06` stays `1e-06`)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_scalar(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{}" if not value else json.dumps(value)
    return str(value)


def _interp_target(value, key: str):
    if not isinstance(value, str):
        return None
    m = re.fullmatch(r"\$\{(?:oc\.select:)?([^,}]+)(?:,[^}]*)?\}", value.strip())
    if not m:
        return None
    target = m.group(1).strip()
    return key.rsplit(".", 1)[0] + target if target.startswith(".") else target


def default_differences() -> list[dict]:
    """Every key minirl's default config (`minirl/config/ppo_trainer.yaml` through its schema) shares with
    verl's whose default differs: `{"key", "minirl", "verl"}`, minirl's value resolved, verl's as written.

    Two keys that both follow the same other key (`${...}` in both) are not a difference: the difference,
    if any, is listed at the key they follow."""
    from omegaconf import OmegaConf

    from minirl.config import compose, load

    raw_minirl = dict(_flatten(OmegaConf.to_container(compose([]), resolve=False)))
    resolved_minirl = dict(_flatten(OmegaConf.to_container(load([], check=False), resolve=True)))
    verl = verl_defaults()
    rows = []
    for key, mine in resolved_minirl.items():
        if key not in verl.raw:
            continue
        verl_raw = verl.raw[key][0]
        if raw_minirl.get(key) == verl_raw:  # the same value, or the same interpolation written the same way
            continue
        a, b = _interp_target(raw_minirl.get(key), key), _interp_target(verl_raw, key)
        if a is not None and a == b:
            continue
        if same_value(yaml_scalar(mine), verl_raw) or same_value(yaml_scalar(mine), verl.resolved(key)):
            continue
        rows.append({"key": key, "minirl": yaml_scalar(mine), "verl": verl_raw})
    return rows


def check_texts(texts: list[tuple[str, str]]) -> list[Problem]:
    """Every check over `(label, text)` pairs (what `claim_texts` returns): stated defaults, unchecked
    statements of a verl default, and metric names."""
    problems = []
    for where, text in texts:
        for sentence in sentences(text):
            problems += check_default_claims(sentence, where)
            problems += check_metric_mentions(sentence, where)
            if unmarked_default_statements(sentence):
                problems.append(Problem(where, f"states a verl default without the checked form: {sentence[:160]!r}; "
                                               "write it as verl's default `KEY=VALUE` (or say it is minirl's)"))
    return problems
