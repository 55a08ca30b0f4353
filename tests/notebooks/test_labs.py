"""Every lab, three ways: with the worked solutions, in the reader's state, and with one wrong answer.

The lab authoring contract is in `minirl/notebook/checks.py`'s docstring; this file checks it.

1. With the solutions (`MINIRL_LAB_SOLUTIONS=1`): the lab runs to its end and every exercise of its
   `## Exercise N` headings has a passing row on the scoreboard (the run writes it to JSON).
2. In the reader's state (committed as is, no solution switch): the lab stops at exercise 1's check
   with `ExerciseNotAnswered`, a hint, and no answer in its output: no `[solution]` line, no line of
   the worked solutions' code, not the value the solutions run printed for exercise 1.
3. With a deliberately wrong answer to exercise 1 (`WRONG_ANSWERS`, re-run in the kernel that just
   stopped, as a reader would): the check stops with `WrongAnswer`, its message names the problem
   (the regexes) and holds none of the `forbid` strings (the right answer).

Runs 1 and 2 are the executions the site renders (docs/hooks/executed_notebooks.py, once per test
session; whichever of this file, tests/notebooks/test_notebooks.py and the site build needs one first runs it).
Run 3 happens inside run 2's kernel, so it costs two cells.
Static checks (fast): at least three code exercises per lab, `SOLUTION = False`, a solutions file
with one `exercise_N` per exercise, a wrong answer for every lab.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "hooks"))
import executed_notebooks as executed

executed.start_session()
LABS = sorted(ROOT.glob("labs/*.ipynb"))
IDS = [p.stem for p in LABS]
HEADING = re.compile(r"^## Exercise (\d+)\b", re.MULTILINE)
CODE_MARK, ANSWER_MARK = "# YOUR CODE", "# YOUR ANSWER"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Wrong:
    """A deliberately wrong answer to exercise 1: the cell's new source, what the message must say, what it must not."""

    source: str
    says: tuple[str, ...]
    forbid: tuple[str, ...] = ()


WRONG_ANSWERS = {
    "01_trace_config_and_batch": Wrong(
        "def batch_numbers(cfg, dp_size):\n"
        "    a = cfg.actor_rollout_ref\n"
        "    n, mini = a.rollout.n, a.actor.ppo_mini_batch_size * a.rollout.n  # forgot to divide by dp_size\n"
        "    return {'sequences_per_step': cfg.data.train_batch_size * n, 'per_rank_mini_batch': mini,\n"
        "            'micro_batches_per_mini_batch': mini // a.actor.ppo_micro_batch_size_per_gpu,\n"
        "            'optimizer_steps_per_step': cfg.data.train_batch_size // a.actor.ppo_mini_batch_size * a.actor.ppo_epochs}\n",
        says=(r"(?i)on this lab.s config on 2 ranks", r"`per_rank_mini_batch`: 2 times too large"),
        forbid=("'per_rank_mini_batch': 4",)),
    "02_custom_reward": Wrong(
        "def my_compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    m = re.fullmatch(r'#### (-?\\d+)', solution_str)  # forgot to strip the whitespace around it\n"
        "    if m is None:\n"
        "        return {'score': 0.0, 'format': 0.0, 'correct': 0.0}\n"
        "    d = abs(int(m.group(1)) - int(ground_truth))\n"
        "    return {'score': 1.0 if d == 0 else 0.1 + 0.4 * max(0.0, 1 - d / 10), 'format': 1.0, 'correct': float(d == 0)}\n",
        says=(r"(?i)on the response '  #### 46\\n'", r"`score`: too small"), forbid=("1.0",)),
    "03_compare_grpo_and_ppo": Wrong(
        "def my_grpo_advantage(token_level_rewards, response_mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=True,\n"
        "                      config=None):\n"
        "    scores, adv = token_level_rewards.sum(-1), torch.zeros(len(index))\n"
        "    for uid in set(index):\n"
        "        rows = torch.as_tensor(index == uid)\n"
        "        g = scores[rows]\n"
        "        adv[rows] = (g - g.mean()) / (g.std(unbiased=False) + epsilon) if len(g) > 1 else g  # biased std\n"
        "    adv = adv[:, None] * response_mask\n"
        "    return adv, adv\n",
        says=(r"(?i)on 3 groups of 4: `advantages`", r"same factor: yours = 1\.155 x the reference"), forbid=("tensor(",)),
    "04_multi_turn_tool_agent": Wrong(
        "class MyTool(BaseTool):\n"
        "    async def execute(self, instance_id, parameters, **kwargs):\n"
        "        return ToolResponse(text=str(eval(parameters['expr']))), 0.0, {}  # eval: never on model output\n",
        says=(r"(?i)on parameters \{'expr': '12\+34'\}", r"is not an 'error: \.\.\.' text")),
    "05_fsdp_and_tp_layout": Wrong(
        "def my_dispatch(worker_group, data):\n"
        "    chunks = data.chunk(worker_group.world_size)  # one chunk per worker: TP partners get different rows\n"
        "    return ([chunks[r] for r in range(worker_group.world_size)],), {}\n\n\n"
        "def my_collect(worker_group, outputs):\n"
        "    return DataProto.concat(outputs)\n",
        says=(r"(?i)worker 0 \(dp rank 0\) got the rows \[0, 1\]: not the chunk of its dp rank",),
        forbid=("[0, 1, 2, 3]",)),
    "06_weight_sync": Wrong(
        "def my_pack(chunks, bucket_size):\n"
        "    bucket, offset = [], 0\n"
        "    for meta, data in chunks:\n"
        "        meta.offset = offset\n"
        "        bucket.append((meta, data))\n"
        "        offset += meta.chunk_size\n"
        "        if offset >= bucket_size:  # closes a bucket once it is full: it may already overflow\n"
        "            yield bucket, offset\n"
        "            bucket, offset = [], 0\n"
        "    if bucket:\n"
        "        yield bucket, offset\n",
        says=(r"(?i)with 64-byte buckets, bucket \d+ holds \d+ bytes: more than the cap",)),
    "07_async_staleness": Wrong(
        "class MyDropBuffer(ReplayBufferAsync):\n"
        "    def _stale_terminal_keys(self, global_steps, partition_id, prompts, fetched):\n"
        "        if partition_id == 'val' or self.max_off_policy_strategy != 'drop':\n"
        "            return []\n"
        "        return [u for u in prompts['finished']  # >= : evicts at the threshold too\n"
        "                if self.span(global_steps, fetched[u]) >= self.max_off_policy_threshold]\n",
        says=(r"(?i)on step 5, groups fetched at 1-5, T=2: it has 4 items: too many",), forbid=("g1_0",)),
    "08_find_the_bug": Wrong(
        "def rule_A(rec):\n"
        "    return [Finding('reward', 'rule_A', 'something is off', 'rollout', [1], [], [])]  # fires on every run\n",
        says=(r"(?i)it fires on the clean run too",), forbid=("negated_reward", "token_sum_loss", "grpo_by_variance")),
    "09_write_a_policy_loss": Wrong(
        "def my_cispo(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode='token-mean', config=None,\n"
        "             rollout_is_weights=None):\n"
        "    rho = torch.exp(log_prob - old_log_prob)\n"
        "    w = torch.clamp(rho, 1 - config.clip_ratio_low, 1 + config.clip_ratio_high)  # no detach: w carries a gradient\n"
        "    per_token = -w * advantages * log_prob\n"
        "    if rollout_is_weights is not None:\n"
        "        per_token = per_token * rollout_is_weights\n"
        "    return core_algos.agg_loss(per_token, response_mask, loss_agg_mode, **batch_info(config)), {}\n",
        says=(r"(?i)the loss agrees but its gradient differs inside the clip window",),
        forbid=("clip_ratio_high).detach()",)),
}


# ------------------------------------------------------------------------------------ reading a lab


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _src(cell) -> str:
    s = cell["source"] if isinstance(cell, dict) else cell.source
    return "".join(s) if isinstance(s, list) else s


def exercise_numbers(path: Path) -> list[int]:
    return sorted({int(n) for c in _cells(path) if c["cell_type"] == "markdown" for n in HEADING.findall(_src(c))})


def exercise_cells(nb_cells) -> dict[int, int]:
    """exercise number -> index of its exercise cell (the first code cell after the heading with a YOUR mark)."""
    out, current = {}, None
    for i, c in enumerate(nb_cells):
        kind = c["cell_type"] if isinstance(c, dict) else c.cell_type
        if kind == "markdown":
            found = HEADING.findall(_src(c))
            current = int(found[0]) if found else current
        elif current is not None and current not in out and (CODE_MARK in _src(c) or ANSWER_MARK in _src(c)):
            out[current] = i
    return out


def output_text(nb) -> str:
    parts = []
    for c in nb.cells:
        for o in c.get("outputs", []) if c.cell_type == "code" else []:
            parts.append("".join(o.get("text", "")))
            parts.append("\n".join(o.get("traceback", [])))
            parts.append("".join(o.get("data", {}).get("text/plain", "")))
            parts.append("".join(o.get("data", {}).get("text/html", "")))
    return ANSI.sub("", "\n".join(parts))


def solution_code_lines(stem: str) -> list[str]:
    """The worked solutions' distinctive lines: function bodies without docstrings, 25+ characters, stripped,
    less the scaffold the lab gives (a line that is also in one of the lab's exercise cells)."""
    path = ROOT / "labs" / "solutions" / f"{stem}.py"
    tree = ast.parse(path.read_text())
    lines = path.read_text().splitlines()
    keep = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            for stmt in body:
                keep.update(range(stmt.lineno - 1, stmt.end_lineno))
    cells = _cells(ROOT / "labs" / f"{stem}.ipynb")
    code = lambda line: line.split("  #")[0].strip()  # a line without its trailing comment
    scaffold = {code(line) for i in exercise_cells(cells).values() for line in _src(cells[i]).splitlines()}
    return sorted({code(lines[i]) for i in keep if len(code(lines[i])) >= 25
                   and not lines[i].strip().startswith("#") and code(lines[i]) not in scaffold})


def solution_value_of_exercise_1(solutions_nb) -> str | None:
    """The value the solutions run printed for exercise 1 (`[solution] 1 ...: VALUE  # how`), None for code."""
    for line in output_text(solutions_nb).splitlines():
        m = re.match(r"\[solution\] 1 [^:]*: (.*?)(?:  # .*)?$", line)
        if m:
            value = m.group(1).strip()
            return None if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value) else value
    return None


# ------------------------------------------------------------------------------------ static checks


@pytest.mark.parametrize("path", LABS, ids=IDS)
def test_lab_follows_the_authoring_contract(path):
    cells = _cells(path)
    numbers = exercise_numbers(path)
    assert numbers and numbers == list(range(1, len(numbers) + 1)), f"{path.name}: exercises {numbers} are not 1..N"
    ex_cells = exercise_cells(cells)
    assert sorted(ex_cells) == numbers, f"{path.name}: exercises without a cell marked {CODE_MARK!r}/{ANSWER_MARK!r}: " \
                                        f"{sorted(set(numbers) - set(ex_cells))}"
    code = [n for n, i in ex_cells.items() if CODE_MARK in _src(cells[i])]
    assert len(code) >= 3, f"{path.name}: {len(code)} code exercises ({code}); a lab has at least three"
    solutions = ROOT / "labs" / "solutions" / f"{path.stem}.py"
    assert solutions.is_file(), f"{path.name}: no worked solutions at {solutions.relative_to(ROOT)}"
    defined = {n.name for n in ast.parse(solutions.read_text()).body if isinstance(n, ast.FunctionDef)}
    missing = [n for n in numbers if f"exercise_{n}" not in defined]
    assert not missing, f"{solutions.name}: no exercise_N for {missing}"
    assert path.stem in WRONG_ANSWERS, f"add a deliberately wrong answer to exercise 1 of {path.stem} to WRONG_ANSWERS"
    for line in solution_code_lines(path.stem):  # the committed notebook holds no solution code
        assert not any(line in _src(c) for c in cells), f"{path.name} holds a line of its worked solutions: {line!r}"


def test_every_wrong_answer_names_an_existing_lab():
    assert set(WRONG_ANSWERS) <= set(IDS), sorted(set(WRONG_ANSWERS) - set(IDS))


# ------------------------------------------------------------------------------------ the three runs


def _probe(stem: str):
    """Re-run exercise 1 with the wrong answer in the stopped kernel; returns (ename, message)."""
    from nbclient.exceptions import CellExecutionError

    def probe(client, nb, stopped_at):
        ex = exercise_cells(nb.cells)[1]
        nb.cells[ex].source = WRONG_ANSWERS[stem].source
        client.execute_cell(nb.cells[ex], ex)
        try:
            client.execute_cell(nb.cells[stopped_at], stopped_at)
        except CellExecutionError as e:
            text = "\n".join(line for o in nb.cells[stopped_at].outputs if o.output_type == "error"
                             for line in o.traceback)
            return e.ename, ANSI.sub("", text)
        return None, ""

    return probe


def reader_run(path: Path):
    run, _ = executed.execute_once(path, mode="reader", probe=_probe(path.stem) if path.stem in WRONG_ANSWERS else None)
    return run


@pytest.mark.slow
@pytest.mark.parametrize("path", LABS, ids=IDS)
def test_lab_passes_with_its_worked_solutions(path, capsys):
    run, ran_now = executed.execute_once(path, mode="solutions")
    with capsys.disabled():
        print(f"\n[lab] {path.name} with solutions: {run.wall_s:.1f} s" + ("" if ran_now else " (earlier this session)"))
    assert run.error is None, f"{path.name} failed with its worked solutions:\n{run.error[-8000:]}"
    assert not run.left_behind, f"{path.name} wrote {run.left_behind} next to itself"
    board = json.loads(executed.scoreboard_path(path).read_text())
    results = {r["exercise"]: r["result"] for r in board["rows"]}
    assert sorted(results) == exercise_numbers(path), f"{path.name}: checks ran for {sorted(results)}"
    bad = {n: r for n, r in results.items() if r not in ("ok", "solution")}
    assert not bad, f"{path.name}: exercises that did not pass with the solutions: {bad}"


@pytest.mark.slow
@pytest.mark.parametrize("path", LABS, ids=IDS)
def test_lab_in_the_readers_state_stops_at_exercise_1_and_shows_no_answer(path, capsys):
    run = reader_run(path)
    with capsys.disabled():
        print(f"\n[lab] {path.name} in the reader's state: stopped after {run.wall_s:.1f} s")
    assert run.error is None, f"{path.name} in the reader's state:\n{run.error[-8000:]}"
    nb = run.nb
    ex1 = exercise_cells(nb.cells)[1]
    first_check = next(i for i in range(ex1 + 1, len(nb.cells)) if nb.cells[i].cell_type == "code")
    assert run.stopped_at == first_check, f"{path.name} stopped at cell {run.stopped_at}, not at exercise 1's check " \
                                          f"(cell {first_check})"
    assert run.stop.startswith("ExerciseNotAnswered: Exercise 1 (") and "Hint: " in run.stop, run.stop
    assert not any(c.get("outputs") for c in nb.cells[run.stopped_at + 1:] if c.cell_type == "code")
    text = output_text(nb) + "\n".join(_src(c) for c in nb.cells)
    assert "[solution]" not in text and "solutions on (" not in text, f"{path.name}: a worked solution in the reader's state"
    for line in solution_code_lines(path.stem):
        assert line not in text, f"{path.name}: the reader's state shows a line of the worked solutions: {line!r}"
    solved, _ = executed.execute_once(path, mode="solutions")
    if solved.nb is not None:
        value = solution_value_of_exercise_1(solved.nb)
        if value:
            assert value not in run.stop, f"{path.name}: the stop message holds exercise 1's answer {value!r}"


@pytest.mark.slow
@pytest.mark.parametrize("path", LABS, ids=IDS)
def test_a_wrong_answer_is_told_what_is_wrong_not_the_answer(path):
    wrong = WRONG_ANSWERS[path.stem]
    run = reader_run(path)
    result = run.probe
    if result is None:  # the reader's run happened earlier without the probe (the site build ran it first)
        result = executed.execute(path, mode="reader", probe=_probe(path.stem)).probe
    ename, message = result
    assert ename == "WrongAnswer", f"{path.name}: the wrong answer to exercise 1 gave {ename!r}:\n{message}"
    for pattern in wrong.says:
        assert re.search(pattern, message), f"{path.name}: the message does not say {pattern!r}:\n{message}"
    for answer in wrong.forbid:
        assert answer not in message, f"{path.name}: the message gives the answer away ({answer!r}):\n{message}"
    assert "Hint: " in message


# ------------------------------------------------------------------------------------ the checks, fast


def test_describe_difference_says_what_is_wrong_without_the_expected_value():
    import torch

    from minirl.notebook.checks import describe_difference as diff

    assert diff(32, 32) is None and diff([32, 8], (32, 8)) is None  # a tuple matches a list (traces store lists)
    assert diff(64, 32) == "2 times too large" and diff(8, 32) == "4 times too small"
    assert diff(-3.0, 3.0) == "the sign is flipped" and diff(33, 32) == "too large"
    assert diff([1, 2, 3], [1, 2]) == "it has 3 items: too many"
    assert diff(["a", "c"], ["a", "b"]) == "item 1: it is not right"
    assert diff({"x": 1, "z": 2}, {"x": 1, "y": 2}) == "keys missing: ['y']; keys it should not have: ['z']"
    assert diff({"x": 2, "y": 2}, {"x": 1, "y": 2}) == "`x`: 2 times too large"
    assert diff(1, True) == "it is a int; answer True or False"
    want = torch.tensor([[1.0, 2.0, 0.0], [3.0, 4.0, 0.0]])
    assert diff(want.clone(), want) is None
    assert "shape (2, 2); it should have shape (2, 3)" in diff(want[:, :2], want)
    assert "yours = 2 x the reference" in diff(2 * want, want, row_labels=["case a", "case b"])
    assert "(row 0: case a)" in diff(2 * want, want, row_labels=["case a", "case b"])
    off_mask = want.clone()
    off_mask[:, 2] = 5.0
    assert "differ only where response_mask is 0" in diff(off_mask, want, mask=(want != 0).float())
    assert "NaN or inf" in diff(want / 0, want)
    assert "`returns`" in diff((want, 2 * want), (want, want), names=("advantages", "returns"))
    for message in (diff(64, 32), diff({"x": 2, "y": 2}, {"x": 1, "y": 2}), diff(2 * want, want)):
        assert "32" not in message and "1.0" not in message  # never the expected value


def _lab(tmp_path, monkeypatch, solutions="", **env):
    from minirl.notebook import checks

    for k in (checks.SOLUTIONS_ENV, checks.RECORD_ENV, checks.SCOREBOARD_ENV):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    (tmp_path / "solutions").mkdir(exist_ok=True)
    (tmp_path / "solutions" / "lab_x.py").write_text(solutions)
    monkeypatch.chdir(tmp_path)  # the kernel runs in the notebook's folder, next to solutions/
    return checks.Lab("lab_x", {"N": 16})


SOLUTIONS = ('def double(x):\n    return 2 * x\n\n'
             'def exercise_1(nb):\n    """N * 2: two per item."""\n    return nb["N"] * 2\n\n'
             'def exercise_2(nb):\n    """Twice its input."""\n    return double\n')


def test_an_unanswered_exercise_stops_with_what_to_do_and_a_hint(tmp_path, monkeypatch):
    from minirl.notebook.checks import ExerciseNotAnswered

    lab = _lab(tmp_path, monkeypatch, SOLUTIONS)
    with pytest.raises(ExerciseNotAnswered) as e:
        lab.check(1, "items", None, 32, hint="each prompt is sampled n times")
    assert "Replace None in the cell above" in str(e.value) and "Hint: each prompt is sampled n times" in str(e.value)
    lines = e.value._render_traceback_()  # what Jupyter shows: the message, no traceback into checks.py
    assert "ExerciseNotAnswered" in lines[0] and not any("Traceback" in line or "checks.py" in line for line in lines)

    def todo(x):
        raise NotImplementedError  # YOUR CODE

    with pytest.raises(ExerciseNotAnswered, match=r"Exercise 2 \(double\): not answered yet"):
        lab.check_code(2, "double", todo, [("x = 1", {"x": 1})], reference=lambda x: 2 * x)
    assert [r["result"] for r in lab.scoreboard] == ["not answered", "not answered"]


def test_a_wrong_answer_stops_with_what_is_wrong_never_the_expected_value(tmp_path, monkeypatch):
    from minirl.notebook.checks import WrongAnswer

    lab = _lab(tmp_path, monkeypatch, SOLUTIONS)
    with pytest.raises(WrongAnswer) as e:
        lab.check(1, "items", 64, 32, hint="count prompts")
    assert "Your answer 64: 2 times too large." in str(e.value) and "32" not in str(e.value)
    with pytest.raises(WrongAnswer, match=r"On x = 3: 3 times too large"):
        lab.check_code(2, "double", lambda x: 6 * x, [("x = 1 (fine)", {"x": 0}), ("x = 3", {"x": 3})],
                       reference=lambda x: 2 * x)
    with pytest.raises(WrongAnswer, match=r"On x = 3, your code raised ZeroDivisionError: division by zero \(line"):
        lab.check_code(2, "double", lambda x: x / 0, [("x = 3", {"x": 3})], reference=lambda x: 2 * x)
    with pytest.raises(WrongAnswer, match="The run made 2 steps"):
        lab.check(3, "config", ["a=1"], verify=lambda ovr: "the run made 2 steps")
    assert lab.check(1, "items", 32, 32) == 32 and lab.scoreboard[0]["result"] == "wrong"  # the worst result stays


def test_solutions_fill_unanswered_exercises_and_are_checked_like_answers(tmp_path, monkeypatch, capsys):
    from minirl.notebook.checks import SOLUTIONS_ENV, WrongAnswer

    lab = _lab(tmp_path, monkeypatch, SOLUTIONS, **{SOLUTIONS_ENV: "1"})
    assert lab.check(1, "items", None, 32) == 32
    fn = lab.check_code(2, "double", None, [("x = 3", {"x": 3})], reference=lambda x: 2 * x)
    assert fn(5) == 10
    out = capsys.readouterr().out
    assert "[solution] 1 items: 32  # N * 2: two per item." in out and "[ok] 2 double" in out
    assert [r["result"] for r in lab.scoreboard] == ["solution", "solution"]
    with pytest.raises(WrongAnswer, match="The worked solution fails its check"):
        lab.check(1, "items", None, 31)
    with pytest.raises(WrongAnswer):  # a wrong answer of the reader's own is not replaced
        lab.check(1, "items", 64, 32)


def test_recording_carries_on_with_the_solutions_and_writes_the_scoreboard(tmp_path, monkeypatch, capsys):
    from minirl.notebook.checks import RECORD_ENV, SCOREBOARD_ENV

    board = tmp_path / "board.json"
    lab = _lab(tmp_path, monkeypatch, SOLUTIONS, **{RECORD_ENV: "1", SCOREBOARD_ENV: str(board)})
    assert lab.check(1, "items", None, 32, hint="h1") == 32  # carries on with the worked solution
    assert lab.check_code(2, "double", lambda x: x, [("x = 3", {"x": 3})], reference=lambda x: 2 * x)(4) == 8
    out = capsys.readouterr().out
    assert "[not answered] 1 items" in out and "[wrong] 2 double: on x = 3: 2 times too small" in out
    assert "[solution]" not in out and "32" not in out.split("recording")[1]
    rows = json.loads(board.read_text())["rows"]
    assert [(r["exercise"], r["result"], r["hint"]) for r in rows] == [(1, "not answered", "h1"), (2, "wrong", "")]


# ------------------------------------------------------------------------------------ minirl lab list | check


def test_lab_list_names_every_lab_and_what_the_reader_writes(capsys):
    from minirl.cli import main
    from minirl.notebook.lab_cli import find_lab, lab_summary

    assert main(["lab", "list"]) == 0
    out = capsys.readouterr().out
    for path in LABS:
        s = lab_summary(path)
        assert s["title"] in out and s["you write"], f"{path.name}: no title or no 'What you write:' line"
        assert [n for n, _ in s["exercises"]] == exercise_numbers(path)
    assert find_lab("3") == find_lab("03") == next(p for p in LABS if p.name.startswith("03_"))
    with pytest.raises(FileNotFoundError, match="no lab '99'"):
        find_lab("99")


def _demo_lab(folder: Path) -> Path:
    import nbformat

    v4 = nbformat.v4
    cells = [v4.new_code_cell("SOLUTION = False"),
             v4.new_code_cell('from minirl.notebook import Lab\nlab = Lab("99_demo", globals(), solution=SOLUTION)'),
             v4.new_markdown_cell("## Exercise 1: a value"), v4.new_code_cell("x = None  # YOUR ANSWER"),
             v4.new_code_cell('x = lab.check(1, "x", x, 3, hint="three")'),
             v4.new_markdown_cell("## Exercise 2: a function"),
             v4.new_code_cell("def f():\n    raise NotImplementedError  # YOUR CODE"),
             v4.new_code_cell('f = lab.check_code(2, "f", f, [("no input", {}, 5)])\nassert f() == 5'),
             v4.new_markdown_cell("## Exercise 3: another value"), v4.new_code_cell("y = 7  # YOUR ANSWER"),
             v4.new_code_cell('y = lab.check(3, "y", y, 8, hint="eight")')]
    cells[0].metadata["tags"] = ["parameters"]
    path = folder / "99_demo.ipynb"
    nbformat.write(v4.new_notebook(cells=cells), path)
    (folder / "solutions").mkdir()
    (folder / "solutions" / "99_demo.py").write_text(
        "def exercise_1(nb):\n    return 3\n\n\ndef exercise_2(nb):\n    return lambda: 5\n\n\n"
        "def exercise_3(nb):\n    return 8\n")
    return path


@pytest.mark.slow
def test_lab_check_records_past_open_and_wrong_exercises(tmp_path, capsys):
    from minirl.cli import main

    path = _demo_lab(tmp_path)
    assert main(["lab", "check", str(path)]) == 1
    out = capsys.readouterr().out
    assert re.search(r"1  a value\s+not answered\n\s+hint: three", out)
    assert re.search(r"2  a function\s+not answered", out)  # the lab went on with the worked f (the assert passed)
    assert re.search(r"3  another value\s+wrong\n\s+what is wrong: your answer 7: too small\n\s+hint: eight", out)
    assert "0 of 3 exercises ok" in out and "stopped early" not in out and "8" not in out.split("3  another value")[1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["99_demo.ipynb", "solutions"]  # nothing written next to it
