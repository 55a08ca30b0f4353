"""Claims about verl that a machine can check hold at the pin (#30): verl defaults, metric names, and the
table of minirl's own defaults that differ from verl's.

The convention (module docstring of `minirl.anchors.claims`, and docs/guide/defaults.md): a verl default is
written ``verl's default `KEY=VALUE` `` (or ``verl's default `Symbol(arg=VALUE)` `` for a Python argument);
a metric only minirl logs is labelled as minirl's in its sentence. Every text of chapters/, labs/, docs/
and the READMEs is read; each file is one test, so a failure names the file and the sentence.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from minirl.anchors import check_text, load_index
from minirl.anchors.claims import (
    VERIFIED_ARGUMENT_DEFAULTS,
    check_default_claims,
    check_metric_mentions,
    check_texts,
    claim_texts,
    default_claims,
    default_differences,
    unmarked_default_statements,
    verl_defaults,
    verl_metric_names,
    verl_runtime_metric_rows,
)

ROOT = Path(__file__).resolve().parents[2]
BY_FILE: dict[str, list[tuple[str, str]]] = defaultdict(list)
for _label, _text in claim_texts(ROOT):
    BY_FILE[re.split(r"[# ]", _label, maxsplit=1)[0]].append((_label, _text))

# Texts whose claims are known not to hold yet (strict xfail: once they hold, the xfail fails and the entry must
# go). Empty since r-labs' lab rewrite merged (labs 02, 06 and labs/README.md were pending on it).
LABS_PENDING: set[str] = set()


def _params():
    for path in sorted(BY_FILE):
        marks = [pytest.mark.xfail(strict=True, reason="labs/ rewrite pending (see #30's lab findings)")] \
            if path in LABS_PENDING else []
        yield pytest.param(path, marks=marks, id=path)


@pytest.mark.parametrize("path", list(_params()))
def test_claims_about_verl_hold(path):
    problems = check_texts(BY_FILE[path])
    assert not problems, f"{len(problems)} claim(s) about verl do not hold:\n" + "\n".join(map(str, problems))


def test_every_text_kind_is_read():
    kinds = {p.split("/")[0] for p in BY_FILE}
    assert {"chapters", "labs", "docs", "README.md"} <= kinds, kinds
    assert any("(code comments)" in label for texts in BY_FILE.values() for label, _ in texts)


# -------------------------------------------------------------------- the checks catch what they must

def test_a_planted_wrong_default_fails_and_the_right_one_passes():
    wrong = check_default_claims("verl's default `actor_rollout_ref.rollout.n=8` makes groups.", "planted")
    assert len(wrong) == 1 and "is `1`" in wrong[0].message and "_generated_ppo_trainer.yaml" in wrong[0].message
    assert check_default_claims("verl's default `actor_rollout_ref.rollout.n=1`.", "x") == []
    assert check_default_claims("verl's default `rollout.n=1`.", "x") == []                      # a unique suffix
    assert check_default_claims("`algorithm.adv_estimator=gae` (verl's default) needs a critic.", "x") == []
    assert check_default_claims("verl's defaults `algorithm.gamma=1.0`, `algorithm.lam=1`.", "x") == []
    assert check_default_claims("verl's default `actor.optim.lr=1e-6`.", "x") == []             # 1.0e-06 as written
    assert "not a key" in check_default_claims("verl's default `rollout.nope=1`.", "x")[0].message
    # a follower key: its interpolation, or what it resolves to, both count as its default
    assert check_default_claims("verl's default `actor_rollout_ref.rollout.prompt_length=512`.", "x") == []


def test_an_ambiguous_suffix_with_different_defaults_must_be_written_in_full():
    # `rollout.tensor_model_parallel_size` is 2 for the policy's rollout, and a key of the reward model's too
    keys = verl_defaults().keys_for("tensor_model_parallel_size")
    assert len(keys) > 1
    got = check_default_claims("verl's default `tensor_model_parallel_size=1`.", "x")
    assert got, "a suffix naming keys with different defaults must not pass"


def test_argument_defaults_are_checked_against_the_verified_table():
    assert check_default_claims("verl's default `ResourcePoolManager(max_colocate_count=3)`.", "x") == []
    assert "10" in check_default_claims("verl's default `RayResourcePool(max_colocate_count=3)`.", "x")[0].message
    assert "not a verified" in check_default_claims("verl's default `Foo(bar=1)`.", "x")[0].message


def test_an_unchecked_statement_of_a_verl_default_is_found():
    for planted in ["verl's max_colocate_count default is 10 CPUs per slot.",
                    "verl runs them as Ray actors (`reward.num_workers`, default 8).",
                    "Every statement is about V1 (`trainer.use_v1=true`, the default at the pin).",
                    "verl packs sequences, defaults to bf16."]:
        assert unmarked_default_statements(planted), planted
    for fine in ["verl's default `trainer.use_v1=true` at the pin.",
                 "Hydra's defaults list of verl composes a dozen files.",
                 "Keys set to anything but verl's default are refused.",
                 "minirl defaults to one CPU per slot, unlike verl."]:
        assert not unmarked_default_statements(fine), fine


def test_a_planted_minirl_metric_attributed_to_verl_fails():
    planted = check_metric_mentions("verl logs `training/rollout_actor_logprob_diff_mean` after each step.", "planted")
    assert len(planted) == 1 and "minirl's metric" in planted[0].message
    assert check_metric_mentions("minirl's own `training/rollout_actor_logprob_diff_mean` is not verl's.", "x") == []
    assert check_metric_mentions("verl logs `training/rollout_probs_diff_{mean,max,std}`.", "x") == []
    assert check_metric_mentions("verl's `rollout_corr/kl` (built from a prefix at run time).", "x") == []
    unknown = check_metric_mentions("verl logs `training/rollout_prob_diff_mean`.", "x")         # a typo
    assert unknown and "neither verl" in unknown[0].message
    assert check_metric_mentions("minirl logs `reward/no_such_metric`.", "x")                   # minirl must write it


def test_the_whole_scan_finds_planted_claims_in_a_notebook(tmp_path):
    import json

    (tmp_path / "chapters").mkdir()
    cells = [{"cell_type": "markdown", "id": "a", "metadata": {},
              "source": ["verl's default `actor_rollout_ref.actor.ppo_mini_batch_size=128`.\n\n",
                         "The trainer logs `version/actor` each step, as verl does.\n"]},
             {"cell_type": "code", "id": "b", "metadata": {}, "outputs": [], "execution_count": None,
              "source": ["GAMMA = 0.99  # algorithm.gamma (verl's default `algorithm.gamma=0.9`)\n"]}]
    (tmp_path / "chapters" / "99_planted.ipynb").write_text(json.dumps({"cells": cells, "metadata": {},
                                                                         "nbformat": 4, "nbformat_minor": 5}))
    problems = [str(p) for p in check_texts(claim_texts(tmp_path))]
    assert any("ppo_mini_batch_size" in p and "256" in p for p in problems), problems
    assert any("version/actor" in p for p in problems), problems
    assert any("(code comments)" in p and "algorithm.gamma" in p for p in problems), problems


# ------------------------------------------------------------- the index and its supplements resolve

def test_the_supplements_cite_real_def_lines():
    idx = load_index()
    for metric, how, cite in verl_runtime_metric_rows():
        assert check_text(f"`{cite}`", idx, metric) == [], (metric, cite)
        assert metric in verl_metric_names()
    for key, (value, cite) in VERIFIED_ARGUMENT_DEFAULTS.items():
        symbol = key.split("(")[0]
        assert check_text(f"`{symbol}` (`{cite}`)", idx) == [], (key, cite)
    for key, (value, where) in verl_defaults().raw.items():
        path, line = where.rsplit(":", 1)
        assert path in idx.files and 1 <= int(line) <= idx.files[path], (key, where)


def test_the_index_knows_the_keys_the_shared_tsv_misses():
    raw = verl_defaults().raw
    assert raw["actor_rollout_ref.rollout.n"][0] == "1"
    assert raw["trainer.logger"][0] == "[console, wandb]"


# ----------------------------------------------- minirl's defaults against verl's: docs/guide/defaults.md

TABLE = ROOT / "docs" / "guide" / "defaults.md"
ROW = re.compile(r"^\| `([^`]+)` \| `([^`]*)` \| `([^`]*)` \| (.*) \|$")


def _table() -> dict[str, tuple[str, str, str]]:
    rows = {}
    for line in TABLE.read_text().splitlines():
        m = ROW.match(line)
        if m:
            assert m.group(1) not in rows, f"{m.group(1)} is listed twice in {TABLE.name}"
            rows[m.group(1)] = (m.group(2), m.group(3), m.group(4).strip())
    return rows


def test_every_default_minirl_changes_is_listed_with_its_reason():
    table, diffs = _table(), {r["key"]: r for r in default_differences()}
    missing = [f"| `{k}` | `{r['minirl']}` | `{r['verl']}` | <why> |" for k, r in diffs.items() if k not in table]
    extra = [k for k in table if k not in diffs]
    wrong = [f"{k}: table says minirl `{table[k][0]}`, verl `{table[k][1]}`; the configs say `{r['minirl']}`, "
             f"`{r['verl']}`" for k, r in diffs.items() if k in table and (table[k][0], table[k][1]) != (r["minirl"], r["verl"])]
    no_reason = [k for k, (_, _, why) in table.items() if len(why) < 10]
    assert not (missing or extra or wrong or no_reason), (
        f"{TABLE.relative_to(ROOT)} is out of date.\nadd (with a reason):\n" + "\n".join(missing)
        + "\nremove (minirl now uses verl's default, or the key is gone):\n" + "\n".join(extra)
        + "\ncorrect:\n" + "\n".join(wrong) + "\nno reason given: " + ", ".join(no_reason))


def test_the_comparison_sees_a_changed_default(monkeypatch):
    """The table test is not vacuous: minirl's defaults do differ from verl's, and following keys are folded."""
    keys = {r["key"] for r in default_differences()}
    assert {"actor_rollout_ref.rollout.n", "algorithm.adv_estimator", "trainer.device"} <= keys
    assert "actor_rollout_ref.actor.rollout_n" not in keys      # follows rollout.n in both projects


def test_default_claims_parse_several_forms():
    got = sorted((c.key, c.value) for c in default_claims(
        "verl's defaults `a.b=1`, `c.d=x` and `e.f=true`; `g.h=2` (verl's default), verl's default `K(x=3)`."))
    assert got == [("K(x)", "3"), ("a.b", "1"), ("c.d", "x"), ("e.f", "true"), ("g.h", "2")]
