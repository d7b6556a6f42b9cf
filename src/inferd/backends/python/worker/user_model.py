"""Importing a user's ``model.py`` and finding its model class (in the worker process)."""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from inferd.backends.python import api
from inferd.backends.python.worker import triton_python_backend_utils as pb_utils

#: The name Triton's models import the helper module by.
COMPAT_MODULE = "triton_python_backend_utils"


def load_module(model_file: Path, module_name: str) -> ModuleType:
    """Import ``model.py`` from its path, with the compat module importable by Triton's name."""
    sys.modules.setdefault(COMPAT_MODULE, pb_utils)
    folder = str(model_file.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(module_name, model_file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {model_file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def find_model_class(module: ModuleType, model_file: Path) -> type[Any]:
    """``TritonPythonModel``, or the one :class:`api.Model` subclass defined in the module."""
    triton = getattr(module, "TritonPythonModel", None)
    if isinstance(triton, type):
        return triton
    typed = [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj)
        and issubclass(obj, api.Model)
        and obj is not api.Model
        and obj.__module__ == module.__name__
    ]
    if len(typed) == 1:
        return typed[0]
    if typed:
        names = ", ".join(sorted(c.__name__ for c in typed))
        raise TypeError(f"{model_file} defines several inferd Model classes ({names}); keep one")
    raise TypeError(
        f"{model_file} defines neither a 'TritonPythonModel' class nor a subclass of "
        "inferd.backends.python.api.Model"
    )
