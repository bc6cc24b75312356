"""Errors that end a run before any process starts (exit code 2)."""


class ConfigError(ValueError):
    """Bad user input: one clear line, exit code 2."""


class BackendUnavailable(RuntimeError):
    """A backend cannot run here; the message says why and how to fix it."""
