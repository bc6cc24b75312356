"""A user's strategy from two files outside the project (tests/userstrategies: toy.py, the strategy and its cost
model; strategy/toy.yaml, its config), found on Hydra's search path: a real 2-peer run on loopback, its summary, the
report of its folder and the projection, both by the toy's own cost model; and the same strategy installed (an
entry point of the group avgbench.strategies), run without the search path."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT, TINY_DIGITS_BYTES, run_train, steps_of, summary_of

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

USER_STRATEGIES = Path(__file__).resolve().parent.parent / "userstrategies"
TOY = [f"hydra.searchpath=[file://{USER_STRATEGIES}]", "strategy=toy", "toy.every=2", "emulate.isolate=off"]


@pytest.fixture(autouse=True)
def user_strategies_on_pythonpath(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(USER_STRATEGIES))


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_a_users_strategy_runs_and_its_run_is_summarised_reported_and_projected(tmp_path):
    run = tmp_path / "toy"
    result = run_train(run, *TOY, "max_steps=12")
    assert result.returncode == 0, result.stderr
    assert "toy x2 done" in result.stdout

    summary = summary_of(run)
    assert summary["status"] == "completed" and summary["workers"] == 2
    assert summary["config"]["strategy"] == {"name": "toy", "target": "toy:Toy", "cost_model": "toy:ToyCost"}
    assert summary["strategy_knobs"] == {"transport": "gloo", "every": 2}
    # an all-reduce of the tiny CNN's gradients every other step: 2(N-1)/N x S = S at N = 2, half of it a step
    assert summary["bytes_sent_per_step"] == TINY_DIGITS_BYTES / 2
    assert [len(steps_of(run, r)) for r in (0, 1)] == [12, 12]

    report = cli("-m", "metrics.report", str(run), "--project", "lan:4")
    assert report.returncode == 0, report.stderr
    text = (run / "report.md").read_text()
    assert "| 1 | toy | toy | transport=gloo, every=2 |" in text
    assert "| toy | 4 x lan (1000 Mbit/s, 0 ms, 1500-byte frames) |" in text

    projected = cli("-m", "metrics.projection", str(run), "--peers", "4", "--link", "lan")
    assert projected.returncode == 0, projected.stderr
    figures = json.loads((run / "projection.json").read_text())["runs"][0]
    measured = figures["measured"]
    assert figures["strategy"] == "toy"
    assert figures["model"] == "compute + 2(N-1)·(α + S/(N·β)) / every: a ring all-reduce of the gradients every `every` steps."
    assert measured["payload_bytes"] == TINY_DIGITS_BYTES and measured["workers"] == 2
    rate = 1000e6 / 8 * figures["payload_share"]["by_mtu"]["1500"]  # lan: standard frames
    # the toy's model: compute + 2(N-1)·S/(N·β) / every, at N = 4
    expected = measured["compute_s"] + 2 * 3 * measured["size_bytes"] / (4 * rate) / 2
    assert figures["projections"][0]["rows"][0]["step_s"] == pytest.approx(expected)


def test_an_installed_packages_strategy_runs_without_the_search_path(tmp_path, monkeypatch):
    dist = tmp_path / "site" / "users_strategies-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: users-strategies\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[avgbench.strategies]\ntoy = toy\n")
    monkeypatch.setenv("PYTHONPATH", f"{dist.parent}:{USER_STRATEGIES}")
    result = run_train(tmp_path / "run", "strategy=toy", "emulate.isolate=off", "max_steps=4")
    assert result.returncode == 0, result.stderr
    summary = summary_of(tmp_path / "run")
    assert summary["status"] == "completed" and summary["config"]["strategy"]["cost_model"] == "toy:ToyCost"
    assert summary["bytes_sent_per_step"] == TINY_DIGITS_BYTES  # every step at toy.every=1, S at N = 2
