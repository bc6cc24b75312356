"""Registries name 'package.module:Class' so heavy backends are imported only when used; a user's code may instead be
named by its file, '/path/to/file.py:Class', loaded without putting its folder on sys.path."""
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any


def module_from_file(path: str) -> ModuleType:
    """The module of a .py file, named by its path (no name of the tool's modules can be one)."""
    if not Path(path).is_absolute():
        raise ValueError(f"{path} is not an absolute path (the peers run in another folder)")
    if path not in sys.modules:
        spec = importlib.util.spec_from_file_location(path, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"{path} is no Python file")
        sys.modules[path] = importlib.util.module_from_spec(spec)  # before running it, as an import does
        try:
            spec.loader.exec_module(sys.modules[path])
        except BaseException:
            del sys.modules[path]  # as a failed import: the next attempt runs the file again
            raise
    return sys.modules[path]


def resolve(spec: str) -> Any:
    module, _, name = spec.rpartition(":")
    return getattr(module_from_file(module) if module.endswith(".py") else importlib.import_module(module), name)
