"""Experiment presets compose and scale with one knob (unit tier); a scaled-down sweep of each ends in a
report, and the Slurm launcher preset composes through train.py (integration tier)."""
import csv
import os
import subprocess
import sys

import pytest

from helpers import ROOT

pytestmark = pytest.mark.timeout(60)


@pytest.mark.integration
@pytest.mark.parametrize("preset, narrowing, runs", [
    # two single-process runs: they are baselines themselves, the sweep adds none
    ("thesis_baseline", ["scale=0.001", "batch_size=32,64", "lr=0.01", "repeats=1"],
     [("single", "1", "1", ""), ("single", "1", "1", "")]),
    # one hivemind run of 2 peers x 8 CPUs; the sweep adds its equal-resource baseline, that baseline's control arm
    # (arm=control) and one peer of 8 CPUs
    # matchmaking of 2 s, as in the other hivemind tests (the preset keeps hivemind's 5 s; a round may wait all of it)
    ("thesis_hivemind", ["scale=0.0005", "peers=2", "target_batch_base=625", "hivemind.use_local_updates=false",
                         "hivemind.matchmaking_time=2", "hivemind.request_timeout=1", "repeats=1"],
     [("hivemind", "2", "8", ""), ("single", "2", "8", ""), ("single", "2", "8", "control"), ("single", "1", "8", "")]),
])
@pytest.mark.timeout(400)
def test_scaled_down_preset_runs_and_reports(tmp_path, preset, narrowing, runs):
    sweep = tmp_path / "sweep"
    result = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "-m", f"experiment={preset}", *narrowing, "model=tiny",
         "progress=false", "sampler.interval=0.2", f"hydra.sweep.dir={sweep}"],
        cwd=ROOT, capture_output=True, text=True, timeout=380, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = list(csv.DictReader((sweep / "runs.csv").open()))
    assert all(r["status"] == "completed" for r in rows), rows
    assert sorted((r["config.strategy.name"], r["config.peers"], r["config.peer_cpus"], r["config.arm"])
                  for r in rows) == sorted(runs)
    assert (sweep / "report.html").stat().st_size > 10_000


@pytest.mark.integration
@pytest.mark.timeout(150)
def test_slurm_launcher_config_composes():
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")

    def show(*args: str, **env: str) -> str:
        done = subprocess.run([sys.executable, str(ROOT / "train.py"), "experiment=slurm", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=60, env=os.environ | env)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "SlurmLauncher" in show("--cfg", "hydra", "-p", "hydra.launcher")
    launch = show("strategy=allreduce", "peers=2", "--cfg", "job", "--resolve", "-p", "launch",  # --cfg job validates
                  SLURM_NNODES="2", SLURM_NODEID="1", SLURM_LAUNCH_NODE_IPADDR="10.213.7.1")
    assert "nnodes: 2" in launch and "node_rank: 1" in launch and "master_addr: 10.213.7.1" in launch
