"""Load the reward function and build the reward manager, checking both at start-up.

verl: `get_custom_reward_fn` (`verl/trainer/ppo/reward.py:50`) imports
`reward.custom_reward_function.path` and takes `.name` from it, wrapping it with
`reward_kwargs`; `load_reward_manager` (`verl/trainer/ppo/reward.py:111`) builds the registered
manager with that function or the default rule (`default_compute_score`). verl reports a bad file
with the import machinery's traceback, and a wrong signature only when the first sample is scored.

minirl checks everything it can before any step runs, and reports each problem in one line naming the
file and the fix (`RewardFunctionError`; `minirl train` exits 2): a missing file, a syntax error or an
import that fails (with its line), a missing or non-callable function name, and a signature the
manager cannot call (`naive`/`dapo` call `fn(data_source=, solution_str=, ground_truth=, extra_info=)`,
`batch` calls `fn(data_sources=, solution_strs=, ground_truths=, extra_infos=)`, each plus
`reward_kwargs`). A function taking `data_sources` under `reward_manager.name=naive` selects `batch`.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import traceback
from functools import partial

from minirl.workers.reward.managers import get_reward_manager_cls
from minirl.workers.reward.scoring import function_location

__all__ = ["RewardFunctionError", "check_signature", "custom_reward_path", "get_custom_reward_fn",
           "load_reward_manager"]

_CALLS = {
    "single": ("data_source", "solution_str", "ground_truth", "extra_info"),
    "batch": ("data_sources", "solution_strs", "ground_truths", "extra_infos"),
}


class RewardFunctionError(RuntimeError):
    """The reward function cannot be used; the one-line message names the file and the fix."""


def _call_with_kwargs(fn, kwargs, *args, **call_kwargs):
    """verl: `_call_with_kwargs` (`verl/trainer/ppo/reward.py:32`): `reward_kwargs` win over the call's."""
    return fn(*args, **{**call_kwargs, **kwargs})


async def _call_with_kwargs_async(fn, kwargs, *args, **call_kwargs):
    """verl: `_call_with_kwargs_async` (`verl/trainer/ppo/reward.py:41`)."""
    return await fn(*args, **{**call_kwargs, **kwargs})


def _section(config) -> dict:
    section = (config.get("reward") or {}).get("custom_reward_function") or {}
    if not section.get("path"):
        section = config.get("custom_reward_function") or {}  # verl's legacy top-level key
    return section


def custom_reward_path(config) -> str | None:
    """`reward.custom_reward_function.path` (or verl's legacy top-level one), None when unset."""
    return _section(config).get("path") or None


def _line_in(exc: BaseException, path: str) -> str:
    if isinstance(exc, SyntaxError) and exc.lineno:
        return f":{exc.lineno}"
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if os.path.abspath(f.filename) == path]
    return f":{lines[-1]}" if lines else ""


def _import_file(path: str, key: str):
    spec = importlib.util.spec_from_file_location("minirl_custom_reward", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise RewardFunctionError(f"{key}={path}{_line_in(e, path)}: SyntaxError: {e.msg}. Fix: correct the file "
                                  f"(`python -m py_compile {path}` shows the error).") from None
    except Exception as e:  # noqa: BLE001 (whatever the file's top level raises is the user's problem to see)
        fix = "install the missing module or remove the import" if isinstance(e, ImportError) else \
            "make the file importable on its own (it is imported at start-up, before any step)"
        raise RewardFunctionError(f"{key}={path}{_line_in(e, path)}: importing it raised {type(e).__name__}: {e}. "
                                  f"Fix: {fix}.") from None
    return module


def get_custom_reward_fn(config):
    """The function `reward.custom_reward_function.name` of the file `.path` (with `reward_kwargs`), or None.

    Raises `RewardFunctionError` (one line, naming the file and the fix) when the file is missing,
    does not import, or lacks a callable of that name.
    """
    section = _section(config)
    path, name = section.get("path"), section.get("name") or "compute_score"
    if not path:
        return None
    key = "reward.custom_reward_function.path"
    path = os.path.abspath(os.path.expanduser(str(path)))
    if not os.path.isfile(path):
        raise RewardFunctionError(f"{key}={path} does not exist. Fix: give the path of a .py file that defines "
                                  f"{name}(data_source, solution_str, ground_truth, extra_info).")
    module = _import_file(path, key)
    fn = getattr(module, name, None)
    if fn is None or not callable(fn):
        defined = sorted(k for k, v in vars(module).items() if inspect.isfunction(v) and not k.startswith("_"))
        what = "is not defined" if fn is None else f"is a {type(fn).__name__}, not a function"
        raise RewardFunctionError(f"reward.custom_reward_function.name={name!r} {what} in {path} (functions there: "
                                  f"{defined}). Fix: set reward.custom_reward_function.name to one of them.")
    kwargs = dict(section.get("reward_kwargs") or {})
    if not kwargs:
        return fn
    wrapper = _call_with_kwargs_async if inspect.iscoroutinefunction(fn) else _call_with_kwargs
    return partial(wrapper, fn, kwargs)


def _unwrap(fn):
    """(the user's function, the reward_kwargs bound to it)."""
    if isinstance(fn, partial) and fn.func in (_call_with_kwargs, _call_with_kwargs_async):
        return fn.args[0], fn.args[1]
    return fn, {}


def check_signature(fn, manager: str) -> None:
    """Raise `RewardFunctionError` unless `manager` can call `fn` the way it will, with `reward_kwargs`."""
    raw, kwargs = _unwrap(fn)
    call = _CALLS["batch" if manager == "batch" else "single"]
    try:
        sig = inspect.signature(raw)
    except (TypeError, ValueError):
        return  # a builtin or C function: nothing to check
    try:
        sig.bind(**{name: None for name in call}, **kwargs)
    except TypeError as e:
        name = getattr(raw, "__name__", "compute_score")
        other = ("naive", "single values") if manager == "batch" else ("batch", "lists")
        extra = f" plus reward_kwargs {sorted(kwargs)}" if kwargs else ""
        raise RewardFunctionError(
            f"reward.custom_reward_function: {name}{sig} ({function_location(raw)}) cannot be called the way the "
            f"{manager!r} reward manager calls it, {name}({', '.join(c + '=...' for c in call)}){extra}: {e}. "
            f"Fix: def {name}({', '.join(call)}, **kwargs) (or reward.reward_manager.name={other[0]} for a "
            f"function of {other[1]}).") from None


def load_reward_manager(config, tokenizer, **reward_kwargs):
    """The configured reward manager with the custom function (checked) or the built-in rule.

    verl: `load_reward_manager` (`verl/trainer/ppo/reward.py:111`). `reward_kwargs` (the reward-model
    server's address and tokenizer) go to the manager's constructor.
    """
    name = config.reward.reward_manager.name
    fn = get_custom_reward_fn(config)
    if fn is not None:
        raw, _ = _unwrap(fn)
        if name == "naive" and "data_sources" in inspect.signature(raw).parameters:
            name = "batch"
        check_signature(fn, name)
    return get_reward_manager_cls(name)(config, tokenizer, compute_score=fn, **reward_kwargs)
