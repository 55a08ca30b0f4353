"""Checks for the labs: an answer against what the run did, and the worked solutions kept out of the notebook.

No verl counterpart. A lab's exercise cell holds `my_x = None  # YOUR ANSWER`; the check cell after
it compares the answer with a number the run's trace or config produced:

    lab = Lab("01_trace_config_and_batch", globals(), solution=SOLUTION)
    ...
    lab.check(1, "sequences per step", my_sequences, run.stage("sample")["extra"]["sessions"], hint="...")
    show_table(lab.scoreboard)

An unanswered exercise prints `[not answered]` and what to do; a right one `[ok]`; a wrong one stops
the notebook with an `AssertionError` that says what the run did. The worked solutions live in
`labs/solutions/<lab>.py`, one function per exercise (`exercise_1(nb)` ... taking the notebook's
namespace, returning the answer), so the reader's copy of the notebook holds no answer. Solutions
are on when the parameter cell says `SOLUTION = True` or the environment has
`MINIRL_LAB_SOLUTIONS=1` (how the test suite executes the labs): then every exercise left at `None`
is filled with its solution, the check prints `[solution]` with how it is computed, and the
solution is checked against the run like any answer.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

__all__ = ["SOLUTIONS_ENV", "Lab", "check_answer", "compartment", "solutions_on"]

SOLUTIONS_ENV = "MINIRL_LAB_SOLUTIONS"
_REPO_SOLUTIONS = Path(__file__).resolve().parents[2] / "labs" / "solutions"


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


def check_answer(question: str, answer, expected, hint: str = "") -> bool:
    """A lab check: None -> say what to do (no error); equal -> print OK; different -> AssertionError.

    Returns True when the answer is right, False when it is still None. A tuple answer matches a list
    (traces store shapes as lists).
    """
    if answer is None:
        print(f"[not answered] {question}: replace None in the cell above with your answer. {hint}".rstrip())
        return False
    norm = (lambda x: list(x) if isinstance(x, tuple) else x)
    if norm(answer) != norm(expected):
        raise AssertionError(f"{question}: your answer {answer!r} differs from the run's {expected!r}. {hint}".rstrip())
    print(f"[ok] {question}: {answer!r}")
    return True


def solutions_on(solution: bool = False) -> bool:
    """Whether to fill unanswered exercises: `solution` (the parameter cell's `SOLUTION`) or `MINIRL_LAB_SOLUTIONS=1`."""
    return bool(solution) or os.environ.get(SOLUTIONS_ENV, "").strip().lower() in ("1", "true", "yes")


class Lab:
    """One lab's checks: fills in the worked solutions when they are on, and keeps the scoreboard.

    `name` is the notebook's stem (`01_trace_config_and_batch`); its solutions are
    `solutions/<name>.py` next to the notebook (the kernel runs in the notebook's folder) or
    `labs/solutions/<name>.py` in the repository. `namespace` is the notebook's `globals()`: the
    solution functions read the parameters and the run from it when a check needs them.
    """

    def __init__(self, name: str, namespace: dict, solution: bool = False):
        self.name = name
        self.namespace = namespace
        self.solutions = solutions_on(solution)
        self.scoreboard: list[dict] = []
        """One row per check: exercise, your answer, what the run says (kept back while unanswered), result."""
        self._module = None
        if self.solutions:
            why = "SOLUTION = True" if solution else f"{SOLUTIONS_ENV}=1"
            print(f"solutions on ({why}): every exercise left at None is filled with its worked solution")

    def _solution_file(self) -> Path:
        for folder in (Path.cwd() / "solutions", _REPO_SOLUTIONS):
            if (folder / f"{self.name}.py").is_file():
                return folder / f"{self.name}.py"
        raise FileNotFoundError(f"no worked solutions for lab {self.name!r}: looked for solutions/{self.name}.py "
                                f"next to the notebook and in {_REPO_SOLUTIONS}; set SOLUTION = False and unset "
                                f"{SOLUTIONS_ENV} to do the lab without them")

    def solution(self, number: int) -> tuple[Any, str]:
        """The worked answer of exercise `number` and how it is computed (the solution's docstring)."""
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

    def check(self, number: int, question: str, answer, expected, hint: str = "") -> bool:
        """Check exercise `number`'s answer against `expected` (what the run did); see `check_answer`.

        With solutions on and `answer` still None, the worked solution is the answer: printed as
        `[solution]`, then checked like any other. Returns True when the answer (or solution) is right.
        """
        label = f"{number} {question}"
        shown = answer is None and self.solutions
        if shown:
            answer, how = self.solution(number)
            print(f"[solution] {label}: {answer!r}" + (f"  # {how}" if how else ""))
        ok = check_answer(label, answer, expected, hint)
        self.scoreboard.append({"exercise": label, "your answer": answer,
                                "the run says": expected if ok else "(answer first)",
                                "result": "solution shown" if shown else ("right" if ok else "not answered")})
        return ok
