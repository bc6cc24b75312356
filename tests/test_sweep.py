"""A multirun in paired blocks: configurations and their baselines interleaved block by block, and a sweep that
resumes in its own directory after an interruption (integration tier: real runs of the tiny model)."""
import csv
import json
import signal
import subprocess
import sys
import time

import pytest

from helpers import QUICK, ROOT

pytestmark = pytest.mark.integration
SHORT = ["max_steps=3", "eval_every=0"]


def multirun(sweep, *overrides) -> list[str]:
    return [sys.executable, str(ROOT / "train.py"), "-m", f"hydra.sweep.dir={sweep}", *QUICK, *SHORT, *overrides]


def runs_of(sweep) -> list[dict]:
    with open(sweep / "runs.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.timeout(240)
def test_repeats_interleave_configurations_and_baselines_in_blocks(tmp_path):
    sweep = tmp_path / "sweep"
    # stepwise on 2 peers needs two baselines: single on the same 2 CPUs and single on 1 CPU
    done = subprocess.run(multirun(sweep, "strategy=stepwise,allreduce", "peers=2", "repeats=2", "seed=5"),
                          cwd=ROOT, capture_output=True, text=True, timeout=220, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = sorted(runs_of(sweep), key=lambda r: float(r["started_at"]))
    assert all(r["status"] == "completed" for r in rows)
    jobs = [(r["config.block"], r["config.strategy.name"], r["config.peers"], r["config.peer_cpus"]) for r in rows]
    every = {("stepwise", "2", "1"), ("allreduce", "2", "1"), ("single", "2", "1"), ("single", "1", "1")}
    # in start order: block 0 holds one run of every job, then block 1 does (baselines among them, not after)
    assert [j[0] for j in jobs] == ["0"] * 4 + ["1"] * 4
    assert {j[1:] for j in jobs[:4]} == every == {j[1:] for j in jobs[4:]}
    assert {(r["config.block"], r["config.seed"]) for r in rows} == {("0", "5"), ("1", "6")}  # seed + block
    assert sorted(p.relative_to(sweep).as_posix() for p in sweep.glob("block*/*")) == [
        f"block{b}/{name}" for b in (0, 1)
        for name in ("baseline_1x1", "baseline_2x1", "strategy=allreduce", "strategy=stepwise")]
    # the same command gives the same shuffled order
    plan = json.loads((sweep / ".avgbench" / "sweep.json").read_text())["jobs"]
    order = [next(o for o in job if o.startswith("hydra.sweep.subdir")) for job in plan]
    assert [row["run_dir"] for row in rows] == [str(sweep / o.split("'")[1]) for o in order]
    verdict = (sweep / "report.md").read_text().split("## Verdict")[1]
    assert "(2 blocks)" in verdict and "95 % interval" in verdict


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
    assert sorted(r["config.block"] for r in rows) == ["0", "1", "2"] and all(r["status"] == "completed" for r in rows)
    # the interrupted attempt is kept aside, out of the report
    (aside,) = sweep.glob("superseded/*/block1/strategy=single")
    assert json.loads((aside / "summary.json").read_text())["status"] == "interrupted"
