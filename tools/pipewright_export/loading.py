"""Loading the user's module: `--module path/to/file.py:factory`."""
import importlib.util
import os
import sys
import traceback
from typing import Callable, Tuple

import torch.nn as nn

from .errors import ExportError


def parse_module_spec(spec: str) -> Tuple[str, str]:
    """'path/to/file.py:factory' -> (path, factory). Raises ExportError on bad syntax."""
    path, sep, factory = spec.rpartition(":")
    if not sep or not path or not factory:
        raise ExportError(f"--module: expected FILE.py:FACTORY, got '{spec}'")
    if not factory.isidentifier():
        raise ExportError(f"--module: '{factory}' in '{spec}' is not a Python function name")
    if not path.endswith(".py"):
        raise ExportError(f"--module: '{path}' in '{spec}' is not a .py file")
    if not os.path.isfile(path):
        raise ExportError(f"--module: {path}: no such file")
    return path, factory


def last_traceback_line(exc: BaseException) -> str:
    """The last line of the exception's traceback: 'ValueError: bad width'."""
    return traceback.format_exception_only(type(exc), exc)[-1].strip()


def load_factory(path: str, factory: str) -> Callable[[], nn.Module]:
    name = "pipewright_user_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ExportError(f"--module: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    # The file's own folder first, so that it can import its neighbours.
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - any error in the user's file is bad input
        raise ExportError(f"{path}: importing it raised {last_traceback_line(e)}") from e
    fn = getattr(module, factory, None)
    if fn is None or not callable(fn):
        raise ExportError(f"--module: {path} has no function '{factory}'")
    return fn


def build_module(path: str, factory: str) -> nn.Module:
    """Calls the zero-argument factory; its exception becomes one line naming it."""
    fn = load_factory(path, factory)
    try:
        module = fn()
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"{path}:{factory}() raised {last_traceback_line(e)}") from e
    if not isinstance(module, nn.Module):
        raise ExportError(
            f"{path}:{factory}() returned {type(module).__name__}, not a torch.nn.Module")
    return module
