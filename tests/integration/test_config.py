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
@pytest.mark.parametrize("override, message", [
    ("strategy=nonsense", "unknown strategy 'nonsense'"),
    ("peers=0", "peers must be >= 1"),
    ("fault.kill_peer=5", "fault.kill_peer=5 is not a worker rank"),
    ("hivemind.target_batch_size=16", "hivemind.target_batch_size=16 is smaller than batch_size=32"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, override, message):
    extra = ["strategy=hivemind", "peers=2"] if override.startswith("hivemind.") else []
    result = cli(f"hydra.run.dir={tmp_path / 'run'}", *extra, override)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("avgbench: error:") and message in lines[0], lines
    assert not (tmp_path / "run" / "peer0").exists()  # nothing was launched


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
