"""Load a user's object by module path: `pkg://package.module` or a `.py` file (verl's `load_extern_object`).

Mirrors `load_module` (`verl/utils/import_utils.py:95`) and `load_extern_object`
(`verl/utils/import_utils.py:192`), which verl uses for
config keys that name user code by path and name (`trainer.v1.sampler.custom_sampler.{path,name}`, custom
datasets). `pkg://__main__` is the running program's own module: in a notebook, the notebook's namespace.
"""

from __future__ import annotations

import importlib
import importlib.util
import os

__all__ = ["PKG_PATH_PREFIX", "load_extern_object", "load_module"]

PKG_PATH_PREFIX = "pkg://"
FILE_PATH_PREFIX = "file://"


def load_module(module_path: str):
    """The module at `pkg://<dotted or slashed module>` (imported) or at a file path (executed, not cached)."""
    if module_path.startswith(PKG_PATH_PREFIX):
        return importlib.import_module(module_path[len(PKG_PATH_PREFIX):].replace("/", "."))
    path = module_path.removeprefix(FILE_PATH_PREFIX)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{module_path!r}: no such file. Fix: give a .py file, or pkg://<module> for an "
                                "importable module (pkg://__main__ in a notebook)")
    spec = importlib.util.spec_from_file_location(f"minirl_extern_{abs(hash(os.path.abspath(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_extern_object(module_path: str, object_name: str):
    """`getattr(load_module(module_path), object_name)`, with a one-line error naming what the module has."""
    module = load_module(module_path)
    if not hasattr(module, object_name):
        names = sorted(k for k in vars(module) if not k.startswith("_"))[:20]
        raise AttributeError(f"{module_path!r} has no {object_name!r} (it has {names}...). Fix: the name of a class "
                             "or function defined there")
    return getattr(module, object_name)
