"""Config composition and validation: bad input is one clear line and exit code 2, before any process starts."""
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from conftest import ROOT
from job.config import CONF_DIR, group_options, validate


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def compose_config(*overrides: str, return_hydra_config: bool = False):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides), return_hydra_config=return_hydra_config)


def test_defaults_compose_and_validate():
    cfg = compose_config()
    assert (cfg.strategy.name, cfg.model.name, cfg.data.name, cfg.peers) == ("single", "resnet18", "digits", 1)
    validate(cfg)


@pytest.mark.parametrize("group", ["model", "data", "optim", "sampler", "network"])
def test_every_group_option_composes(group):
    for option in group_options(group):
        cfg = compose_config(f"{group}={option}")
        assert cfg[group] is not None


def test_cfg_job_and_help():
    shown = cli("--cfg", "job", "peers=3")
    assert shown.returncode == 0, shown.stderr
    assert "peers: 3" in shown.stdout and "name: single" in shown.stdout
    helped = cli("--help")
    assert helped.returncode == 0 and "strategy" in helped.stdout


@pytest.mark.parametrize("override, message", [
    ("strategy=nonsense", "unknown strategy 'nonsense'"),
    ("model=vgg99", "unknown model 'vgg99'"),
    ("data=mnist", "unknown data 'mnist'"),
    ("peers=0", "peers must be >= 1"),
    ("peer_cpus=0", "peer_cpus must be >= 1"),
    ("batch_size=0", "batch_size must be >= 1"),
    ("peers=2", "strategy=single runs one peer"),
    ("fault.kill_peer=5", "fault.kill_peer=5 is not a worker rank"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, override, message):
    result = cli(f"hydra.run.dir={tmp_path / 'run'}", override)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines == [lines[0]] and lines[0].startswith("avgbench: error:") and message in lines[0], lines
    assert not (tmp_path / "run" / "peer0").exists()  # nothing was launched


@pytest.mark.parametrize("data", ["cifar10", "imagefolder"])
def test_missing_dataset_root(tmp_path, data):
    result = cli(f"hydra.run.dir={tmp_path / 'run'}", f"data={data}", f"data.root={tmp_path / 'absent'}")
    assert result.returncode == 2
    assert "avgbench: error:" in result.stderr and "absent" in result.stderr


def test_run_dir_of_an_earlier_run_is_refused(tmp_path):
    earlier = tmp_path / "run" / ".avgbench" / "run_id"
    earlier.parent.mkdir(parents=True)
    earlier.write_text("an earlier run")
    result = cli(f"hydra.run.dir={tmp_path / 'run'}", "model=tiny", "max_steps=1")
    assert result.returncode == 2 and "already holds a run" in result.stderr, result.stderr
    assert not (tmp_path / "run" / "peer0").exists()


def test_unknown_key_is_rejected_with_exit_2():
    result = cli("no_such_knob=3")
    assert result.returncode == 2 and "no_such_knob" in result.stderr
