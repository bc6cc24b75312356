"""Registries name 'package.module:Class' so heavy backends are imported only when used."""
import importlib


def resolve(spec: str):
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)
