"""The typed packages (pyproject.toml [tool.mypy] files) pass mypy with every definition annotated."""
import os
import tomllib
from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
def test_the_typed_packages_pass_mypy(monkeypatch):
    typed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    assert typed and all((ROOT / path).exists() for path in typed)
    monkeypatch.chdir(ROOT)
    out, err, status = api.run(["--no-error-summary", "--config-file", os.fspath(ROOT / "pyproject.toml")])
    assert status == 0, out + err
