"""A user's model, defined outside the project (tests/usermodels on PYTHONPATH), trains under single and under a
2-peer allreduce, and the projection reads its run; the device check runs both strategies and records their
figures (here on the CPU, gloo)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT, run_train, steps_of, summary_of
from metrics.recording.jsonl import read_jsonl
from metrics.recording.steplog import PHASES

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

USER_MODELS = Path(__file__).resolve().parent.parent / "usermodels"
USER_MODEL = ["model=custom", "model.target=user_models:build", "+model.options.hidden=4", "eval_every=0"]
# SmallNet(10 classes, 1 channel, hidden=4) on digits, counted by hand: conv 36 + BN 8 + linear 170 parameters
SMALLNET_DIGITS_BYTES = 4 * (36 + 8 + 170)  # float32: 856


@pytest.fixture(autouse=True)
def user_models_on_pythonpath(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(USER_MODELS))


def test_a_users_model_trains_under_single_and_allreduce_and_its_run_projects(tmp_path):
    single, allreduce = tmp_path / "single", tmp_path / "allreduce"
    result = run_train(single, *USER_MODEL, "strategy=single", "max_steps=6")
    assert result.returncode == 0, result.stderr
    result = run_train(allreduce, *USER_MODEL, "strategy=allreduce", "peers=2", "max_steps=12")
    assert result.returncode == 0, result.stderr

    assert summary_of(single)["status"] == "completed" and len(steps_of(single, 0)) == 6
    summary = summary_of(allreduce)
    assert summary["status"] == "completed" and summary["config"]["model"]["target"] == "user_models:build"
    assert summary["bytes_sent_per_step"] == SMALLNET_DIGITS_BYTES  # DDP all-reduces every gradient once
    assert [len(steps_of(allreduce, r)) for r in (0, 1)] == [12, 12]

    projected = subprocess.run([sys.executable, "-m", "metrics.projection", str(allreduce), "--peers", "4",
                                "--link", "lan"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert projected.returncode == 0, projected.stderr
    run = json.loads((allreduce / "projection.json").read_text())["runs"][0]
    assert run["measured"]["payload_bytes"] == SMALLNET_DIGITS_BYTES and run["measured"]["workers"] == 2
    assert run["projections"][0]["rows"][0]["peers"] == 4


def test_the_device_check_records_both_runs_figures(tmp_path):
    steps, batch = 6, 16
    result = subprocess.run([sys.executable, "bench/device_check.py", str(tmp_path), "--device", "cpu", "--model",
                             "tiny", "--steps", str(steps), "--batch-size", str(batch), "--repeats", "2",
                             "--budget-s", "200"], cwd=ROOT, capture_output=True, text=True, timeout=220)
    assert result.returncode == 0, result.stderr
    recorded = json.loads((tmp_path / "device_check.json").read_text())
    assert recorded["device"] == "cpu" and recorded["gpus"] == [] and recorded["machine"]["cores"] >= 1
    assert [(r["name"], r["repeat"]) for r in recorded["runs"]] == [
        ("single", 0), ("allreduce", 0), ("single", 1), ("allreduce", 1)]  # alternated: a drift hits both alike
    for run in recorded["runs"]:
        name, workers = run["name"], {"single": 1, "allreduce": 2}[run["name"]]
        assert run["backend"] == {"single": None, "allreduce": "gloo"}[name]
        run_dir = tmp_path / "runs" / f"{name}-{run['repeat']}"
        rank0 = read_jsonl(run_dir / "peer0" / "steps.jsonl")
        assert run["workers"] == workers and run["steps"] == len(rank0) == steps
        assert run["device"]["name"] == "cpu"
        # samples/s against the step logs' own clocks: all workers' samples over the longest worker's training time,
        # in the window: the steps after the first warm-up step (a fifth of 6, at least 1)
        logs = [read_jsonl(p) for p in run_dir.glob("peer*/steps.jsonl")]
        longest = max(log[-1]["train_s"] - log[0]["train_s"] for log in logs)
        assert run["warmup_steps"] == 1
        assert run["samples_per_s"] == pytest.approx((steps - 1) * batch * workers / longest, rel=0.05)
        # the steady step is one of rank 0's steps after the warm-up; the mean step covers the training time
        durations = [sum(s[p] for p in PHASES) for s in rank0]
        assert min(durations[1:]) <= run["step_s_steady"] <= max(durations[1:])
        # the phases of a step lie within its training time, and cover most of it (a few ms a step are logging)
        assert 0.5 * longest <= run["step_s_mean"] * (steps - 1) <= 1.05 * longest
        assert sum(run["time_breakdown_share"].values()) == pytest.approx(1)
    assert {name: s["completed"] for name, s in recorded["spread"].items()} == {"single": 2, "allreduce": 2}
