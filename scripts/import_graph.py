"""The import graph between minirl's rooms, checked against the dependency rules of the house plan.

A *room* is a top-level module of the package or one of its folders (`workers/` is split into its
rooms: `workers.engine`, `workers.rollout`, `workers.reward`, and `workers` for `engine_workers.py`;
`trainer.ppo.core_algos` is a room of its own, the formulas, and so is `trainer.distillation`, the
distillation losses). Every `import` in `minirl/` (at module
level or inside a function; `if TYPE_CHECKING:` imports are left out: they never run) gives an arrow
from the importing module's room to the imported module's room.

    python scripts/import_graph.py            # the rule violations and cycles; exit 1 if any
    python scripts/import_graph.py --arrows   # also every room -> room arrow with one example line

The rules are DESIGN.md section 6 ("what may import what"); tests/unit/test_import_graph.py runs the
same check, so a new upward arrow fails the unit tests.
"""
from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "minirl"

# rooms that are one module each, or a folder split finer than its first level
SPLIT = ("minirl.workers.engine", "minirl.workers.rollout", "minirl.workers.reward",
         "minirl.trainer.ppo.core_algos", "minirl.trainer.ppo", "minirl.trainer.distillation")

# (room, rooms it must not import, the rule as DESIGN.md words it). A room "x" covers "x" and
# everything under it, so "minirl.trainer" forbids trainer.ppo and the formulas too.
STAGES = ("minirl.trainer", "minirl.workers", "minirl.agent_loop", "minirl.checkpoint_engine")
RULES: list[tuple[str, tuple[str, ...], str]] = [
    ("minirl.trainer.ppo.core_algos", ("minirl.*", "!minirl.utils.torch_functional", "!minirl.utils.config"),
     "core_algos imports torch, numpy and minirl.utils.torch_functional only (and the config getter)"),
    ("minirl.protocol", STAGES + ("minirl.single_controller",), "protocol knows no stage, worker or trainer"),
    ("minirl.protocol_fields", STAGES + ("minirl.single_controller",), "protocol knows no stage, worker or trainer"),
    ("minirl.transfer_queue", STAGES + ("minirl.single_controller",),
     "transfer_queue knows no stage, worker or trainer"),
    ("minirl.single_controller", ("minirl.trainer", "minirl.workers", "minirl.agent_loop",
                                  "minirl.checkpoint_engine", "minirl.config"),
     "single_controller knows no roles and no algorithm"),
    ("minirl.workers.engine", ("minirl.trainer", "minirl.agent_loop", "minirl.workers.rollout",
                               "minirl.workers.reward", "minirl.checkpoint_engine"),
     "workers/engine knows no algorithm"),
    ("minirl.trace", STAGES + ("minirl.single_controller", "minirl.doctor", "minirl.notebook"),
     "trace never imports what it measures"),
    ("minirl.config", STAGES + ("minirl.models", "minirl.data", "minirl.single_controller", "minirl.tools",
                                "minirl.doctor", "minirl.notebook", "minirl.trace"),
     "config is a leaf: it imports no stage"),
    ("minirl.models", ("minirl.trainer",), "models never imports the trainer"),
    ("minirl.doctor", ("minirl.trainer", "minirl.workers", "minirl.agent_loop", "minirl.checkpoint_engine",
                       "minirl.single_controller"),
     "doctor reads what a run wrote; it imports no trainer or worker"),
    ("minirl.tools", ("minirl.agent_loop",), "tools know nothing of the agent loop"),
    ("minirl.utils", STAGES + ("minirl.config", "minirl.models", "minirl.data", "minirl.doctor",
                               "minirl.notebook", "minirl.single_controller"),
     "utils are helpers below every room"),
    ("minirl.checkpoint_engine", ("minirl.trainer", "minirl.agent_loop", "minirl.workers.engine",
                                  "minirl.workers.reward"),
     "checkpoint_engine moves weights from the actor to the rollout (verl: it knows the rollout replicas)"),
]
# imports that a rule allows by name: (importing module, imported module, why)
ALLOWED: list[tuple[str, str, str]] = [
    # verl does the same inside compute_policy_loss_bypass_mode (an import when the loss runs)
    ("minirl.trainer.ppo.core_algos", "minirl.trainer.ppo.rollout_corr_helper",
     "the bypass_mode loss reads the rollout-correction formulas when it runs"),
    # the doctor's fault injection is a tool for tests and notebooks: it runs a training job to break it
    ("minirl.doctor.faults", "minirl.notebook", "the faults run a small job through the notebook harness"),
    ("minirl.doctor.seam_faults", "minirl.notebook", "lab 08's faults run a small job through the notebook harness"),
]


# circles between rooms that verl has too: (rooms, why)
ALLOWED_CYCLES: list[tuple[frozenset[str], str]] = [
    (frozenset({"minirl.checkpoint_engine", "minirl.workers.rollout"}),
     "verl: checkpoint_engine/base.py imports the rollout replicas, replica.py:230 the engine (at run time)"),
    (frozenset({"minirl.trainer.distillation", "minirl.workers"}),
     ("verl: engine_workers.py imports trainer/distillation (distillation_ppo_loss), whose losses.py imports "
      "workers/utils/losses.py (ppo_loss)")),
]


def room(module: str) -> str:
    for r in SPLIT:
        if module == r or module.startswith(r + "."):
            return r
    parts = module.split(".")
    return ".".join(parts[:2])


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_module(module: str) -> bool:
    path = ROOT.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def imports_of(path: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, at run time) for every minirl import in `path`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    mod = module_name(path)
    is_pkg = path.name == "__init__.py"
    out: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_func: bool, skip: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.body:
                    visit_stmt(sub, in_func, True)
                for sub in child.orelse:
                    visit_stmt(sub, in_func, skip)
                continue
            visit_stmt(child, in_func, skip)

    def visit_stmt(child: ast.AST, in_func: bool, skip: bool) -> None:
        f = in_func or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
        if not skip:
            if isinstance(child, ast.Import):
                for a in child.names:
                    if a.name.split(".")[0] == "minirl":
                        out.append((a.name, child.lineno, in_func))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                if target.split(".")[0] == "minirl":
                    for a in child.names:  # `from minirl.x import y`: y is a module when minirl/x/y(.py) exists
                        sub = f"{target}.{a.name}"
                        out.append((sub if _is_module(sub) else target, child.lineno, in_func))
        visit(child, f, skip)

    visit(tree, False, False)
    return out


def graph() -> dict[tuple[str, str], list[tuple[str, str, int, bool]]]:
    """(room, room) -> [(module, imported module, line, run time)], arrows inside one room left out."""
    arrows: dict[tuple[str, str], list[tuple[str, str, int, bool]]] = defaultdict(list)
    for path in sorted(PKG.rglob("*.py")):
        src = module_name(path)
        for target, line, runtime in imports_of(path):
            a, b = room(src), room(target)
            if a != b and b != "minirl":  # `from minirl import __version__` is the package's own
                arrows[(a, b)].append((str(path.relative_to(ROOT)), target, line, runtime))
    return arrows


def _allowed(src_module: str, target: str) -> bool:
    return any(_covers(s, src_module) and _covers(t, target) for s, t, _ in ALLOWED)


def _covers(prefix: str, module: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def violations(arrows=None) -> list[str]:
    arrows = graph() if arrows is None else arrows
    out = []
    for (a, b), sites in sorted(arrows.items()):
        for src_room, forbidden, why in RULES:
            if not _covers(src_room, a):
                continue
            banned = [f for f in forbidden if not f.startswith("!")]
            exempt = [f[1:] for f in forbidden if f.startswith("!")]
            for path, target, line, _ in sites:
                hit = any(_covers(f[:-2], target) if f.endswith(".*") else _covers(f, target) for f in banned)
                if not hit or any(_covers(e, target) for e in exempt):
                    continue
                if _allowed(module_name(ROOT / path), target):
                    continue
                out.append(f"{path}:{line}: {a} -> {target}  ({why})")
    return out


def cycles(arrows=None) -> list[list[str]]:
    """Strongly connected groups of rooms (more than one room): imports that run in a circle."""
    arrows = graph() if arrows is None else arrows
    succ: dict[str, set[str]] = defaultdict(set)
    for (a, b), sites in arrows.items():  # an import a rule allows by name (ALLOWED) closes no circle
        if any(not _allowed(module_name(ROOT / path), target) for path, target, _, _ in sites):
            succ[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    groups: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(succ[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 and not any(frozenset(comp) == rooms for rooms, _ in ALLOWED_CYCLES):
                groups.append(sorted(comp))

    for v in sorted(set(succ) | {b for _, b in arrows}):
        if v not in index:
            strong(v)
    return groups


def main(argv: list[str]) -> int:
    sys.setrecursionlimit(10000)
    arrows = graph()
    rooms = sorted({a for a, _ in arrows} | {b for _, b in arrows})
    print(f"{len(rooms)} rooms, {len(arrows)} arrows between them")
    if "--arrows" in argv:
        for (a, b), sites in sorted(arrows.items()):
            path, _, line, runtime = sites[0]
            print(f"  {a} -> {b}  ({len(sites)}x; e.g. {path}:{line}{' run time' if runtime else ''})")
    bad = violations(arrows)
    print(f"{len(bad)} imports break a rule of DESIGN.md section 6")
    for line in bad:
        print("  " + line)
    cyc = cycles(arrows)
    print(f"{len(cyc)} cycles between rooms")
    for group in cyc:
        print("  " + " <-> ".join(group))
    return 1 if bad or cyc else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
