"""How each recorded figure is measured: the texts of metrics/methods.yaml, one section per module that states them,
with the constants they name filled in."""
from functools import cache
from pathlib import Path

import yaml

METHODS_FILE = Path(__file__).resolve().parents[1] / "methods.yaml"


@cache
def sections() -> dict[str, dict[str, str]]:
    return yaml.safe_load(METHODS_FILE.read_text())


def methods(section: str, **constants: object) -> dict[str, str]:
    """The section's texts, each with `constants` filled in where it names them ({NAME} or {NAME:format})."""
    return {key: text.format(**constants) for key, text in sections()[section].items()}
