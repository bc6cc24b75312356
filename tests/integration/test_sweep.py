"""A multirun in paired blocks: its design declared before the first run (the primary figure, the comparisons, the
blocks, a Williams order, the control arm; unit tier), configurations and their baselines interleaved block by
block, a sweep that resumes in its own directory after an interruption, and a failed job retried once in its block
(integration tier: real runs of the tiny model)."""
import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import QUICK, ROOT

SHORT = ["max_steps=3", "eval_every=0"]


# --- real sweeps (integration tier) -------------------------------------------------------------


def multirun(sweep, *overrides) -> list[str]:
    return [sys.executable, str(ROOT / "train.py"), "-m", f"hydra.sweep.dir={sweep}", *QUICK, *SHORT, *overrides]


def runs_of(sweep) -> list[dict]:
    with open(sweep / "runs.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_repeats_interleave_configurations_and_baselines_in_blocks(tmp_path):
    from metrics.report.design import williams

    sweep = tmp_path / "sweep"
    # stepwise on 2 peers needs two baselines: single on the same 2 CPUs (run twice: the control arm) and on 1 CPU
    done = subprocess.run(multirun(sweep, "strategy=stepwise,allreduce", "peers=2", "repeats=2", "seed=5"),
                          cwd=ROOT, capture_output=True, text=True, timeout=280, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    # the design comes first, before any run
    first = done.stdout.splitlines()[:3]
    assert first[0] == ("avgbench: primary figure of data=digits, model=tiny, fixed before the first run (the verdict "
                        "ranks and claims on it alone): time-to-target (test_accuracy ≥ 0.95, estimator "
                        "causal_isotonic; seconds of training)")
    assert first[1] == ("avgbench: 2 blocks of 5 jobs (control arm: baseline_2x1_control), in a Williams order of 10 "
                        "sequences (not balanced: a multiple of 10 blocks would be); 3 comparisons declared, "
                        "Holm-corrected per (dataset, model)")
    rows = sorted(runs_of(sweep), key=lambda r: float(r["started_at"]))
    assert all(r["status"] == "completed" for r in rows)
    jobs = [(r["config.block"], r["config.strategy.name"], r["config.peers"], r["config.peer_cpus"], r["arm"])
            for r in rows]
    every = {("stepwise", "2", "1", ""), ("allreduce", "2", "1", ""), ("single", "2", "1", ""),
             ("single", "2", "1", "control"), ("single", "1", "1", "")}
    # in start order: block 0 holds one run of every job, then block 1 does (baselines among them, not after)
    assert [j[0] for j in jobs] == ["0"] * 5 + ["1"] * 5
    assert {j[1:] for j in jobs[:5]} == every == {j[1:] for j in jobs[5:]}
    assert {(r["config.block"], r["config.seed"]) for r in rows} == {("0", "5"), ("1", "6")}  # seed + block
    assert sorted(p.relative_to(sweep).as_posix() for p in sweep.glob("block*/*")) == [
        f"block{b}/{name}" for b in (0, 1)
        for name in ("baseline_1x1", "baseline_2x1", "baseline_2x1_control", "strategy=allreduce",
                     "strategy=stepwise")]
    # the plan's order: block B follows sequence B of a Williams design, recorded in runs.csv
    plan = json.loads((sweep / ".avgbench" / "sweep.json").read_text())
    order = [next(o for o in job if o.startswith("hydra.sweep.subdir")) for job in plan["jobs"]]
    assert [row["run_dir"] for row in rows] == [str(sweep / o.split("'")[1]) for o in order]
    names = ["strategy=stepwise", "strategy=allreduce", "baseline_2x1", "baseline_1x1", "baseline_2x1_control"]
    for block in (0, 1):
        placed = sorted((r["order.position"], Path(r["run_dir"]).name) for r in rows if r["config.block"] == str(block))
        assert [name for _, name in placed] == [names[i] for i in williams(5)[block]]
    assert plan["declaration"]["comparisons"] == {"data=digits, model=tiny": [
        ["strategy=allreduce", "baseline_2x1"], ["strategy=stepwise", "baseline_2x1"],
        ["strategy=allreduce", "strategy=stepwise"]]}
    verdict = (sweep / "report.md").read_text().split("## Verdict")[1]
    assert "Primary figure (declared before the first run): time-to-target" in verdict
    assert "reached test_accuracy ≥ 0.95 in" in verdict and "2 blocks" in verdict


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_repeats_auto_without_recorded_noise_is_refused_before_any_run(tmp_path):
    sweep = tmp_path / "sweep"
    refused = subprocess.run(multirun(sweep, "strategy=allreduce", "peers=2", "repeats=auto",
                                      f"report.noise_results={tmp_path / 'evidence.json'}"),
                             cwd=ROOT, capture_output=True, text=True, timeout=50, stdin=subprocess.DEVNULL)
    assert refused.returncode == 2
    assert (f"avgbench: error: repeats=auto plans the blocks from the primary figure's noise recorded in "
            f"{tmp_path / 'evidence.json'} (primary_noise), which has none for allreduce") in refused.stderr
    assert "bench/primary_noise.py multirun/noise" in refused.stderr and not sweep.exists()


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_an_interrupted_sweep_resumes_in_its_directory(tmp_path):
    sweep = tmp_path / "sweep"
    command = multirun(sweep, "strategy=single", "peers=1", "repeats=3", "max_steps=15")
    first = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 150
    while not list(sweep.glob("block*/*/summary.json")):
        assert first.poll() is None and time.monotonic() < deadline, "the first job did not finish"
        time.sleep(0.2)
    while not (sweep / "block1" / "strategy=single" / ".avgbench" / "run_id").exists():
        assert first.poll() is None and time.monotonic() < deadline, "the second job did not start"
        time.sleep(0.1)
    first.send_signal(signal.SIGINT)  # Ctrl-C during the second job
    first.communicate(timeout=60)
    assert first.returncode != 0
    done = sweep / "block0" / "strategy=single"
    kept_id = (done / ".avgbench" / "run_id").read_text()

    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=200, stdin=subprocess.DEVNULL)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "1 of 3 runs already completed" in again.stdout
    assert (done / ".avgbench" / "run_id").read_text() == kept_id  # kept, not rerun
    rows = runs_of(sweep)
    current = [r for r in rows if r["attempt"] != "superseded"]
    assert sorted(r["config.block"] for r in current) == ["0", "1", "2"]
    assert all(r["status"] == "completed" for r in current)
    # the interrupted attempt is kept aside, stays in the report and counts; the rerun stands beside it, not counted
    (aside,) = sweep.glob("superseded/*/block1/strategy=single")
    assert json.loads((aside / "summary.json").read_text())["status"] == "interrupted"
    (attempt,) = [r for r in rows if r["attempt"] == "superseded"]
    assert (attempt["config.block"], attempt["status"], attempt["run_dir"]) == ("1", "interrupted", str(aside))
    assert next(r for r in current if r["config.block"] == "1")["attempt"] == "run later, not counted"
    plan = json.loads((sweep / ".avgbench" / "sweep.json").read_text())
    assert plan["reruns"] == [{"job": "block1/strategy=single", "attempts": [aside.relative_to(sweep).as_posix()]}]


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_failed_job_is_retried_once_in_its_block(tmp_path):
    """A job whose peer raises on its first attempt only (a one-shot fault): the sweeper runs it once more in the
    same block, with the same seed, before the next block; the failed attempt is moved aside and reported."""
    import os

    sweep = tmp_path / "sweep"
    env = os.environ | {"AVGBENCH_FAULT_ONCE": str(tmp_path / "fired")}
    done = subprocess.run(multirun(sweep, "strategy=single", "peers=1", "repeats=2", "report.control=false",
                                   "fault.raise_peer=0", "fault.at_step=2"),
                          cwd=ROOT, capture_output=True, text=True, timeout=280, stdin=subprocess.DEVNULL, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = sorted(runs_of(sweep), key=lambda r: float(r["started_at"]))
    # block 0 failed, block 0 again, then block 1: the retry comes before the next block
    assert [(r["config.block"], r["config.seed"], r["status"], r["attempt"]) for r in rows] == [
        ("0", "0", "failed", "superseded"), ("0", "0", "completed", "run later, not counted"),
        ("1", "1", "completed", "current")]
    (aside,) = sweep.glob("superseded/*_retry/block0/strategy=single")
    assert rows[0]["run_dir"] == str(aside)
    assert json.loads((aside / "summary.json").read_text())["status"] == "failed"
    plan = json.loads((sweep / ".avgbench" / "sweep.json").read_text())
    assert plan["reruns"] == [{"job": "block0/strategy=single", "attempts": [aside.relative_to(sweep).as_posix()]}]
    assert len(plan["id"]) == 12 and {r["config.plan"] for r in rows} == {plan["id"]}  # every attempt names its plan
    assert "failed: moved to" in done.stdout and "running it once more in its block" in done.stdout
    assert "| failed, superseded |" in (report := (sweep / "report.md").read_text())  # the Failures table
    assert "| completed, run later, not counted |" in report


@pytest.mark.integration
@pytest.mark.timeout(200)
def test_a_job_that_fails_twice_stays_a_failure(tmp_path):
    """The retry is once: a job whose peer raises on every attempt fails the sweep, both attempts reported."""
    sweep = tmp_path / "sweep"
    done = subprocess.run(multirun(sweep, "strategy=single", "peers=1", "repeats=1", "report.control=false",
                                   "fault.raise_peer=0", "fault.at_step=2"),
                          cwd=ROOT, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert done.returncode == 1
    assert f"avgbench: 1 run(s) failed: {sweep / 'block0' / 'strategy=single'}\n" in done.stderr
    rows = sorted(runs_of(sweep), key=lambda r: float(r["started_at"]))
    assert [(r["config.block"], r["status"], r["attempt"]) for r in rows] == [
        ("0", "failed", "superseded"), ("0", "failed", "run later, not counted")]
