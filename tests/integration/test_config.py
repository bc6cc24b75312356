"""Config composition and validation: bad input is one clear line and exit code 2, before any process starts.

Unit tier: launchers.config.check_overrides / validate on configs composed in this process.
Integration tier: the same through train.py's command line (exit code 2, one line on stderr).
"""
import pytest

from helpers import cli

pytestmark = pytest.mark.timeout(60)


# --- integration tier: the same through train.py ------------------------------------------------
@pytest.mark.integration
def test_cfg_job_and_help():
    shown = cli("--cfg", "job", "peers=3")
    assert shown.returncode == 0, shown.stderr
    assert "peers: 3" in shown.stdout and "name: single" in shown.stdout
    helped = cli("--help")
    assert helped.returncode == 0 and "strategy" in helped.stdout


@pytest.mark.integration
def test_a_fault_on_no_worker_exits_2_with_one_line(tmp_path):
    result = cli(f"hydra.run.dir={tmp_path / 'run'}", "fault.kill_peer=5")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0] == "avgbench: error: fault.kill_peer=5 is not a worker rank (0..0)", lines
    assert not (tmp_path / "run").exists()  # nothing was launched


REFUSED = [  # issue 52's cases: each refused by `--cfg job` and by a run, before anything starts
    (["peers=0"], "peers must be >= 1 (a whole number), got 0"),
    (["peers=-3"], "peers must be >= 1 (a whole number), got -3"),
    (["network.bandwidth_mbit=-5"], "network.bandwidth_mbit must be > 0 Mbit/s"),
    (["strategy=diloco", "+diloco.inner_step=5"], "unknown key diloco.inner_step (did you mean diloco.inner_steps?)"),
    (["strategy=diloco", "diloco.inner_step=5"], "unknown key diloco.inner_step (did you mean diloco.inner_steps?)"),
    (["strategy=hivemind", "peers=2", "batch_size=64", "hivemind.target_batch_size=32"],
     "hivemind.target_batch_size=32 is smaller than batch_size=64"),
    (["strategy=nonsense"], "unknown strategy 'nonsense'"),
    (["strategy=alreduce"], "unknown strategy 'alreduce' (did you mean allreduce? choose from:"),  # issue 78's cases
    (["data=imagefolder"], "data.root has no default with data=imagefolder: add data.root=..."),
    (["data=cifar10"], "data.root has no default with data=cifar10: add data.root=..."),
]


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["--cfg job", "run"])
@pytest.mark.parametrize("overrides, message", REFUSED)
def test_cfg_job_and_a_run_refuse_in_one_line_with_exit_2(tmp_path, mode, overrides, message):
    shown = ["--cfg", "job"] if mode == "--cfg job" else []
    result = cli(*shown, f"hydra.run.dir={tmp_path / 'run'}", *overrides)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("avgbench: error:") and message in lines[0], lines
    assert result.stdout == ""  # no config shown
    assert not (tmp_path / "run").exists()  # refused before Hydra made the run's directory: no peer started


@pytest.mark.integration
def test_missing_dataset_root_exits_2(tmp_path):
    result = cli(f"hydra.run.dir={tmp_path / 'run'}", "data=cifar10", f"data.root={tmp_path / 'absent'}")
    assert result.returncode == 2
    assert "avgbench: error:" in result.stderr and "absent" in result.stderr


@pytest.mark.integration
def test_run_dir_of_an_earlier_run_is_refused(tmp_path):
    earlier = tmp_path / "run" / ".avgbench" / "run_id"
    earlier.parent.mkdir(parents=True)
    earlier.write_text("an earlier run")
    result = cli(f"hydra.run.dir={tmp_path / 'run'}", "model=tiny", "max_steps=1")
    assert result.returncode == 2 and "already holds a run" in result.stderr, result.stderr
    assert not (tmp_path / "run" / "peer0").exists()


@pytest.mark.integration
def test_unknown_key_is_rejected_with_exit_2():
    result = cli("no_such_knob=3")
    assert result.returncode == 2 and "no_such_knob" in result.stderr
