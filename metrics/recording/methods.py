"""How each figure is measured: metrics/methods.yaml's texts, a section per module, with its constants filled in."""
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
