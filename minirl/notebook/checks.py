"""Checks for the labs: named checks that stop the notebook until an exercise is answered, and the worked solutions.

No verl counterpart: verl has no notebooks. A lab is a notebook in `labs/` in which the reader writes
code (a function, a class, a config) that minirl runs for real through the seam verl uses (a
registry, a config path, a class), and predicts numbers no chapter prints. After every exercise cell
a check cell calls `lab.check(...)` (a named check per exercise, as otter-grader's
`grader.check("q1")`):

    lab = Lab("03_compare_grpo_and_ppo", globals(), solution=SOLUTION)
    ...
    def my_grpo_advantage(token_level_rewards, response_mask, index, epsilon=1e-6, **kwargs):
        raise NotImplementedError  # YOUR CODE
    ...
    grpo = lab.check_code(1, "GRPO advantage", my_grpo_advantage, cases, reference=compute_grpo_outcome_advantage,
                          hint="one mean and one std per uid")

What a check does with the answer:

| the answer | reader's state | solutions on | `minirl lab check` (recording) |
|---|---|---|---|
| `None`, or code that raises `NotImplementedError` | stops: `ExerciseNotAnswered`, what to do and a hint | fills in the worked solution, prints `[solution]` and checks it | records "not answered", carries on with the worked solution |
| right | `[ok]` | `[ok]` | records "ok" |
| wrong | stops: `WrongAnswer`, what is wrong (which input, which key, which shape, off by what factor), never the expected value | stops the same way | records "wrong", carries on with the worked solution |

A check returns what the rest of the lab runs with: the reader's answer when it passed, else the
worked solution (solutions on, or recording). The two exceptions render in Jupyter as their message
alone (IPython's `_render_traceback_`), not as a traceback into this module.

**Why not otter-grader or nbgrader.** Both were read (otter-grader 7.0.0, nbgrader 0.9.6 from PyPI)
before keeping this module. They serve a course: an instructor writes one solution notebook,
`otter assign` / `nbgrader generate_assignment` produce the student copy and its test files, the
students submit, and grading runs elsewhere (otter: Docker containers or Gradescope; nbgrader: a
course database, an exchange folder, a JupyterLab extension). A self-study reader on a laptop has
none of that, and minirl's checks need three things they do not give: (1) the expected values come
from the reader's own run (change a parameter and the check compares with the new run), where
otter's and nbgrader's tests are fixed when the assignment is generated; (2) an unanswered exercise
stops the notebook, where `grader.check("q1")` returns a failed result and the notebook runs on
(nbgrader's `validate` is a separate command); (3) a wrong answer is told what is wrong without the
expected value, where otter's OK-format tests are doctests, whose failure prints "Expected: ... Got:
...". Their install is also heavy for a reader who came for verl: otter-grader pulls pandas,
ipywidgets, ipylab, jupytext, python-on-whales (Docker) and nbconvert[webpdf]; nbgrader pulls
JupyterLab, notebook 7, SQLAlchemy and alembic. This module is ~400 lines with no dependency
(IPython for the short error display). What minirl takes from them: otter's one named check per
question and hidden answers, nbgrader's `raise NotImplementedError` in the cell the student fills.

**The lab authoring contract** (what `labs/NN_name.ipynb`, its solutions and tests hold; a new lab
follows it and the test suite checks it):

1. The first code cell is the one parameter cell (tagged `parameters`) and sets `SOLUTION = False`.
2. A cheap set-up cell makes `lab = Lab("NN_name", globals(), solution=SOLUTION)`. Exercise 1 comes
   before any heavy run, and its check calls the reader's code (or reads the value) first, so the
   reader's state stops within seconds (the CI runs every lab in the reader's state).
3. Every exercise has a markdown heading `## Exercise N: title` (N = 1, 2, ...), then one exercise
   cell that holds `my_x = None  # YOUR ANSWER` or a function / class whose body is
   `raise NotImplementedError  # YOUR CODE`, then a check cell that calls `lab.check(N, ...)` or
   `lab.check_code(N, ...)` (several checks of one exercise share N). At least three exercises ask
   for code that minirl runs through verl's seam; predictions ask for what no chapter prints.
4. Hints say where to look, never the answer; the expected value reaches the reader only through
   the check's verdict.
5. The worked solutions live in `labs/solutions/NN_name.py`, one `exercise_N(nb)` per exercise: it
   takes the notebook's namespace (`globals()`) and returns the answer (a value, a function, a
   class); the first line of its docstring is printed next to `[solution]`. The site shows them on
   a page of their own (docs/hooks/).
6. The last cells show `lab.show_scoreboard()` and "What minirl simplifies".
7. tests/notebooks/test_labs.py runs the lab three ways: with the solutions (every exercise passes), in the
   reader's state (stops at exercise 1, no answer in the output) and with the deliberately wrong
   answer to exercise 1 that `WRONG_ANSWERS["NN_name"]` there holds (add one).
8. labs/README.md and docs/labs/index.md get a row: what the reader writes, the measured time.

Switches (environment): `MINIRL_LAB_SOLUTIONS=1` turns the solutions on (as `SOLUTION = True`);
`MINIRL_LAB_RECORD=1` records instead of stopping (`minirl lab check`); `MINIRL_LAB_SCOREBOARD=<file>`
writes the scoreboard there as JSON after every check.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["RECORD_ENV", "SCOREBOARD_ENV", "SOLUTIONS_ENV", "ExerciseNotAnswered", "Lab", "WrongAnswer",
           "check_answer", "compartment", "describe_difference", "solutions_on"]

SOLUTIONS_ENV = "MINIRL_LAB_SOLUTIONS"
RECORD_ENV = "MINIRL_LAB_RECORD"
SCOREBOARD_ENV = "MINIRL_LAB_SCOREBOARD"
_REPO_SOLUTIONS = Path(__file__).resolve().parents[2] / "labs" / "solutions"
_RED, _BOLD, _RESET = "\x1b[31m", "\x1b[1m", "\x1b[0m"
_RANK = {"ok": 0, "solution": 1, "not answered": 2, "wrong": 3}  # of several checks of an exercise, the worst decides


def _on(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


class _LabStop(Exception):
    """Base of the two ways a check stops a lab; shown as its message only (no traceback)."""

    title = ""

    def __init__(self, number: int, question: str, what: str, hint: str = ""):
        self.number, self.question, self.what, self.hint = number, question, what, hint
        super().__init__(self.text())

    def text(self) -> str:
        lines = [f"Exercise {self.number} ({self.question}): {self.title}", self.what]
        if self.hint:
            lines.append(f"Hint: {self.hint}")
        return "\n".join(lines)

    def _render_traceback_(self) -> list[str]:  # IPython shows these lines instead of a traceback
        first, *rest = self.text().splitlines()
        return [f"{_RED}{_BOLD}{type(self).__name__}{_RESET}: {_BOLD}{first}{_RESET}", *rest]


class ExerciseNotAnswered(_LabStop):
    """The exercise still holds `None` or `raise NotImplementedError`: the lab stops here until it is answered."""

    title = "not answered yet."


class WrongAnswer(_LabStop, AssertionError):
    """The answer disagrees with the run (or the reference); the message says how, never with the expected value."""

    title = "not right yet."


# ------------------------------------------------------------------------------------------- comparing


def _is_tensor(x) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, (int, float, bool, str))


def _as_float_array(x):
    import numpy as np

    if hasattr(x, "detach"):
        x = x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=float)


def _factor(got: float, want: float) -> str | None:
    """'2 times too large' / 'half' ... when got/want is a clean factor, else None."""
    if want == 0 or got == 0:
        return None
    r = got / want
    if math.isclose(r, -1.0, rel_tol=1e-6):
        return "the sign is flipped"
    for k in range(2, 65):
        if math.isclose(abs(r), k, rel_tol=1e-6):
            return f"{k} times too large" + (" and of the wrong sign" if r < 0 else "")
        if math.isclose(abs(r), 1 / k, rel_tol=1e-6):
            return f"{k} times too small" + (" and of the wrong sign" if r < 0 else "")
    return None


def _number_difference(got: float, want: float, tol: float) -> str | None:
    if isinstance(got, float) and not math.isfinite(got):
        return f"it is {got}"
    if math.isclose(got, want, rel_tol=tol, abs_tol=tol):
        return None
    factor = _factor(got, want)
    if factor:
        return factor
    return "too large" if got > want else "too small"


def _tensor_difference(got, want, tol: float, row_labels: Sequence[str] | None, mask=None) -> str | None:
    import numpy as np

    g, w = _as_float_array(got), _as_float_array(want)
    if g.shape != w.shape:
        return f"it has shape {tuple(g.shape)}; it should have shape {tuple(w.shape)}"
    bad_values = ~np.isfinite(g)
    if bad_values.any():
        where = tuple(int(i) for i in np.argwhere(bad_values)[0])
        return f"it holds NaN or inf (first at index {where})"
    diff = np.abs(g - w)
    close = diff <= tol + tol * np.abs(w)
    if close.all():
        return None
    idx = tuple(int(i) for i in np.argwhere(~close)[0])
    at = f"index {idx}"
    if row_labels is not None and g.ndim >= 1 and idx[0] < len(row_labels):
        at += f" (row {idx[0]}: {row_labels[idx[0]]})"
    parts = [f"{int((~close).sum())} of {close.size} entries differ; the first at {at}, off by {float(diff[idx]):.3g}"]
    if mask is not None:
        m = _as_float_array(mask).astype(bool)
        if m.shape == g.shape and close[m].all():
            parts.append("they differ only where response_mask is 0 (masked positions must hold 0, or what the "
                         "reference keeps there)")
        elif m.shape == g.shape and close[~m].all() and (~m).any():
            parts.append("the masked positions agree; the unmasked ones do not")
    nz = np.abs(w) > 1e-12
    if nz.any():
        ratios = g[nz] / w[nz]
        if np.allclose(ratios, ratios[0], rtol=1e-4, atol=1e-6) and not math.isclose(ratios[0], 1.0, rel_tol=1e-4):
            parts.append(f"everywhere off by the same factor: yours = {ratios[0]:.4g} x the reference")
    offset = g - w
    if np.allclose(offset, offset.flat[0], atol=max(tol, 1e-6)) and abs(offset.flat[0]) > tol:
        parts.append(f"everywhere off by the same constant {offset.flat[0]:.4g}")
    return "; ".join(parts)


def describe_difference(got, want, tol: float = 1e-6, row_labels: Sequence[str] | None = None,
                        mask=None, names: Sequence[str] | None = None) -> str | None:
    """What is wrong with `got` compared with `want`, in words that never contain `want`; None when they agree.

    Numbers: too large / too small, or the clean factor ("2 times too large", "the sign is flipped").
    Lists: how many items, then the first item that differs. Dicts: missing and extra keys, then the
    keys whose values differ. Tensors and arrays: the shape (a shape is a specification, not an
    answer), NaN/inf, how many entries differ, the first (with `row_labels[row]`), a constant factor
    or offset, and whether only masked positions (`mask == 0`) differ. `names` label the items of a
    tuple of outputs (`("advantages", "returns")`). A tuple matches a list (traces store lists).
    """
    if isinstance(want, bool) or isinstance(got, bool):
        if not isinstance(got, bool):
            return f"it is a {type(got).__name__}; answer True or False"
        return None if got == want else "it is not right"
    if _is_tensor(want) or _is_tensor(got):
        if not (_is_tensor(got) and _is_tensor(want)):
            return f"it is a {type(got).__name__}; it should be a tensor"
        return _tensor_difference(got, want, tol, row_labels, mask)
    if isinstance(want, (int, float)):
        if not isinstance(got, (int, float)):
            return f"it is a {type(got).__name__}; it should be a number"
        return _number_difference(float(got), float(want), tol if isinstance(want, float) or isinstance(got, float)
                                  else 0.0)
    if isinstance(want, str):
        if not isinstance(got, str):
            return f"it is a {type(got).__name__}; it should be a string"
        return None if got.strip() == want.strip() else "it is not right"
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return f"it is a {type(got).__name__}; it should be a dict"
        missing = [k for k in want if k not in got]
        extra = [k for k in got if k not in want]
        if missing or extra:
            return "; ".join(([f"keys missing: {missing}"] if missing else []) + ([f"keys it should not have: {extra}"]
                                                                                   if extra else []))
        bad = [(k, describe_difference(got[k], want[k], tol, row_labels, mask)) for k in want]
        bad = [f"`{k}`: {why}" for k, why in bad if why]
        return "; ".join(bad) or None
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)):
            return f"it is a {type(got).__name__}; it should be a list"
        if len(got) != len(want):
            return f"it has {len(got)} items: {'too many' if len(got) > len(want) else 'too few'}"
        for i, (g, w) in enumerate(zip(got, want)):
            why = describe_difference(g, w, tol, row_labels, mask)
            if why:
                label = f"`{names[i]}`" if names and i < len(names) else f"item {i}"
                return f"{label}: {why}"
        return None
    return None if got == want else "it is not right"


# ------------------------------------------------------------------------------------------- the lab


def check_answer(question: str, answer, expected, hint: str = "", number: int = 0, tol: float = 1e-6) -> bool:
    """One check without a `Lab`: None stops (`ExerciseNotAnswered`), wrong stops (`WrongAnswer`), right prints [ok]."""
    if answer is None:
        raise ExerciseNotAnswered(number, question, "Replace None in the cell above with your answer, then run it "
                                  "and this cell again.", hint)
    why = describe_difference(answer, expected, tol)
    if why:
        raise WrongAnswer(number, question, f"Your answer {_short(answer)}: {why}.", hint)
    print(f"[ok] {question}: {_short(answer)}")
    return True


def _short(value, limit: int = 80) -> str:
    if callable(value):
        return getattr(value, "__name__", type(value).__name__)
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def solutions_on(solution: bool = False) -> bool:
    """Whether to fill unanswered exercises: `solution` (the parameter cell's `SOLUTION`) or `MINIRL_LAB_SOLUTIONS=1`."""
    return bool(solution) or _on(SOLUTIONS_ENV)


def _raised_in_your_code(e: BaseException) -> str:
    """`TypeError: ... (line N of your cell: `code`)` for an exception raised by the reader's code."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.endswith(("checks.py",))]
    where = ""
    if frames:
        f = frames[-1]
        where = f" (line {f.lineno}: `{(f.line or '').strip()}`)"
    return f"{type(e).__name__}: {e}{where}"


class _Unanswered(Exception):
    pass


class Lab:
    """One lab's checks: stops on unanswered and wrong answers, fills in the worked solutions, keeps the scoreboard.

    `name` is the notebook's stem (`01_trace_config_and_batch`); its solutions are
    `solutions/<name>.py` next to the notebook (the kernel runs in the notebook's folder) or
    `labs/solutions/<name>.py` in the repository. `namespace` is the notebook's `globals()`: the
    solution functions read the parameters and the runs from it.
    """

    def __init__(self, name: str, namespace: dict, solution: bool = False):
        self.name = name
        self.namespace = namespace
        self.solutions = solutions_on(solution)
        """Fill unanswered exercises with the worked solutions (`SOLUTION = True` or `MINIRL_LAB_SOLUTIONS=1`)."""
        self.recording = _on(RECORD_ENV) and not self.solutions
        """Record instead of stopping, and carry on with the worked solutions (`minirl lab check`)."""
        self.scoreboard: list[dict] = []
        """One row per exercise: exercise, question, result (ok / solution / not answered / wrong), what is wrong, hint."""
        self._module = None
        if self.solutions:
            why = "SOLUTION = True" if solution else f"{SOLUTIONS_ENV}=1"
            print(f"solutions on ({why}): every unanswered exercise is filled with its worked solution")
        elif self.recording:
            print(f"recording ({RECORD_ENV}=1): checks record their verdict and the lab carries on")
        self._write_scoreboard()

    # ------------------------------------------------------------------ solutions
    def _solution_file(self) -> Path:
        for folder in (Path.cwd() / "solutions", _REPO_SOLUTIONS):
            if (folder / f"{self.name}.py").is_file():
                return folder / f"{self.name}.py"
        raise FileNotFoundError(f"no worked solutions for lab {self.name!r}: looked for solutions/{self.name}.py "
                                f"next to the notebook and in {_REPO_SOLUTIONS}; set SOLUTION = False and unset "
                                f"{SOLUTIONS_ENV} to do the lab without them")

    def solution(self, number: int) -> tuple[Any, str]:
        """The worked answer of exercise `number` and how it is computed (the first line of its docstring)."""
        if self._module is None:
            path = self._solution_file()
            spec = importlib.util.spec_from_file_location(f"minirl_lab_solutions_{self.name}", path)
            self._module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(self._module)
        fn = getattr(self._module, f"exercise_{number}", None)
        if fn is None:
            raise AttributeError(f"{self._module.__file__} has no exercise_{number}(nb): add it (it takes the "
                                 "notebook's namespace and returns the answer)")
        doc = (fn.__doc__ or "").strip()
        return fn(self.namespace), doc.splitlines()[0] if doc else ""

    # ------------------------------------------------------------------ checks
    def check(self, number: int, question: str, answer, expected=None, hint: str = "", *,
              verify: Callable[[Any], str | None] | None = None, tol: float = 1e-6):
        """Check exercise `number`'s `answer`; returns what the lab carries on with (yours, or the worked solution).

        Either against `expected` (a value the run produced; compared by `describe_difference`), or
        with `verify(answer)`, which runs the answer (a config, a class ...) and returns None when it
        is right, else what is wrong; `NotImplementedError` raised inside it means "not answered".
        """

        def judge(value):
            if value is None:
                raise _Unanswered
            if verify is not None:
                try:
                    return verify(value)
                except NotImplementedError:
                    raise _Unanswered from None
            why = describe_difference(value, expected, tol)
            return f"your answer {_short(value)}: {why}" if why else None

        return self._run(number, question, answer, judge, hint, _todo(answer))

    def check_code(self, number: int, question: str, fn, cases: Sequence, reference: Callable | None = None,
                   hint: str = "", *, tol: float = 1e-6, names: Sequence[str] | None = None,
                   mask_key: str | None = None, compare: Callable | None = None):
        """Run the reader's `fn` on `cases` and compare each output with the reference's; returns the fn to carry on with.

        `cases`: `(label, kwargs)` pairs (the expected output is `reference(**kwargs)`) or
        `(label, kwargs, expected)` triples. Tensors in `kwargs` are cloned for each call, so an
        in-place edit by one function cannot change what the other sees. `names` label the items of
        a tuple output; `mask_key` names the kwarg holding the mask (to say "only masked positions
        differ"); `compare(got, want)` replaces `describe_difference`. A case that disagrees is named
        by its label.
        """

        def judge(value):
            if value is None:
                raise _Unanswered
            for case in cases:
                label, kwargs = case[0], case[1]
                want = case[2] if len(case) > 2 else reference(**_clone(kwargs))
                try:
                    got = value(**_clone(kwargs))
                except NotImplementedError:
                    raise _Unanswered from None
                except Exception as e:  # noqa: BLE001 - the reader's code failed: say how, on which input
                    return f"on {label}, your code raised {_raised_in_your_code(e)}"
                if compare is not None:
                    why = compare(got, want)
                else:
                    why = describe_difference(got, want, tol, names=names,
                                              mask=kwargs.get(mask_key) if mask_key else None)
                if why:
                    return f"on {label}: {why}"
            return None

        return self._run(number, question, fn, judge, hint, _todo(fn))

    def _run(self, number: int, question: str, answer, judge, hint: str, todo: str):
        label = f"{number} {question}"
        try:
            why = judge(answer)
            state = "wrong" if why else "ok"
        except _Unanswered:
            why, state = None, "not answered"
        if state == "ok":
            print(f"[ok] {label}")
            self._record(number, question, "ok")
            return answer
        if self.solutions and state == "not answered":
            answer, how = self.solution(number)
            print(f"[solution] {label}: {_short(answer)}" + (f"  # {how}" if how else ""))
            try:
                why = judge(answer)
            except _Unanswered:
                why = "the worked solution is not answered either"
            if why:
                self._record(number, question, "wrong", why, hint)
                raise WrongAnswer(number, question, f"The worked solution fails its check: {why}.", hint)
            print(f"[ok] {label}")
            self._record(number, question, "solution")
            return answer
        self._record(number, question, state, why or "", hint)
        if self.recording:
            print(f"[{state}] {label}" + (f": {why}" if why else "") + (f"\n  hint: {hint}" if hint else ""))
            try:
                carry, _ = self.solution(number)
            except (FileNotFoundError, AttributeError) as e:
                raise (ExerciseNotAnswered if state == "not answered" else WrongAnswer)(
                    number, question, f"The lab cannot carry on without this answer ({e}).", hint) from None
            judge(carry)  # what the check runs with an answer (a training run, say) the cells below read
            return carry
        if state == "not answered":
            raise ExerciseNotAnswered(number, question, f"{todo}, then run it and this cell again. (Stuck? "
                                      "SOLUTION = True in the first cell fills in the worked solutions.)", hint)
        raise WrongAnswer(number, question, f"{why[0].upper()}{why[1:]}.", hint)

    # ------------------------------------------------------------------ scoreboard
    def _record(self, number: int, question: str, result: str, what: str = "", hint: str = "") -> None:
        """One row per exercise: its first check's question; of several checks, the worst result decides."""
        row = {"exercise": number, "question": question, "result": result,
               "what is wrong": what if result == "wrong" else "", "hint": hint if result != "ok" else ""}
        old = next((r for r in self.scoreboard if r["exercise"] == number), None)
        if old is None:
            self.scoreboard.append(row)
        elif _RANK[result] > _RANK[old["result"]]:
            old.update({k: v for k, v in row.items() if k != "question"})
        self._write_scoreboard()

    def _write_scoreboard(self) -> None:
        path = os.environ.get(SCOREBOARD_ENV)
        if path:
            Path(path).write_text(json.dumps({"lab": self.name, "solutions": self.solutions,
                                              "recording": self.recording, "rows": self.scoreboard}, indent=1))

    def show_scoreboard(self, caption: str = "your answers"):
        """The scoreboard as an HTML table (the last expression of a cell)."""
        from minirl.notebook.tables import show_table

        cols = ["exercise", "question", "result", "what is wrong", "hint"]
        return show_table(self.scoreboard, columns=cols, caption=caption)


def _todo(answer) -> str:
    """What to do about an unanswered exercise: replace its None, or write its code."""
    if answer is None:
        return "Replace None in the cell above with your answer"
    return "Write the code in the cell above (replace `raise NotImplementedError`)"


def _clone(kwargs: dict) -> dict:
    out = {}
    for k, v in kwargs.items():
        if hasattr(v, "clone") and hasattr(v, "detach"):
            v = v.detach().clone()
        elif hasattr(v, "copy") and hasattr(v, "dtype"):
            v = v.copy()
        out[k] = v
    return out


def compartment(batch, name: str) -> str:
    """Which compartment of a `DataProto` holds `name`: `batch`, `non_tensor_batch`, `meta_info` (or KeyError)."""
    if batch.batch is not None and name in batch.batch.keys():  # noqa: SIM118 (a TensorDict refuses `in`)
        return "batch"
    if name in batch.non_tensor_batch:
        return "non_tensor_batch"
    if name in batch.meta_info:
        return "meta_info"
    raise KeyError(f"{name!r} is in no compartment of this DataProto; fields: "
                   f"{[r['key'] for r in batch.summary()]}")
