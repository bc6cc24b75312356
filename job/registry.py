"""Registries name 'package.module:Class' so heavy backends are imported only when used."""
import importlib
from typing import Any


def resolve(spec: str) -> Any:
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)
