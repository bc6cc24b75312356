"""The size of the project's Python outside tests, recorded so that growth shows at every stop: a change that adds
lines raises RECORDED on purpose, in its own diff; the goal is GOAL."""
import os

import pytest

from helpers import ROOT

pytestmark = pytest.mark.timeout(60)

GOAL = 18_122  # lines, at most
RECORDED = 20219  # lines at the last change that grew or shrank the project


NOT_SOURCE = {"tests", "multirun", "outputs", "build", "__pycache__"}  # and hidden folders (.venv, .git)


def python_lines() -> int:
    """`wc -l` of the project's Python files outside tests/ (a clean clone's, as `git ls-files` lists them)."""
    lines = 0
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [d for d in subfolders if d not in NOT_SOURCE and not d.startswith(".")]
        lines += sum(len((ROOT / folder / f).read_bytes().splitlines()) for f in files if f.endswith(".py"))
    return lines


def test_python_outside_tests_is_no_larger_than_recorded():
    lines = python_lines()
    assert lines <= RECORDED, (f"{lines:,} lines of Python outside tests, {lines - RECORDED:,} more than recorded "
                               f"({RECORDED:,}; goal {GOAL:,}): shrink the change, or raise RECORDED in its diff")
