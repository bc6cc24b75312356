"""`pip install .` gives an `avgbench` command that runs from any directory, on the installed copy, whose modules a
user's own on PYTHONPATH (a metrics.py, a train.py, an avgbench_cli.py) never replace.

The fresh virtualenv sees this interpreter's site-packages through a .pth file (torch and the rest are not
installed again) and gets only the project, from a copy of the checkout (the build writes build/ beside its sources).
Commands run in a directory outside the checkout, so only the installed copy can be imported.
"""
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from helpers import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

NOT_SOURCES = shutil.ignore_patterns(".git", ".venv", "outputs", "multirun", "build", "dist", "*.egg-info",
                                     "__pycache__", ".pytest_cache")


def run(command: list, cwd: Path, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                            stdin=subprocess.DEVNULL, check=False, env=env)
    assert result.returncode == 0, f"{command} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """(the new virtualenv, a working directory outside the checkout) after `pip install` of a copy."""
    base = tmp_path_factory.mktemp("install")
    source = base / "source"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCES)
    env_dir = base / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    site = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], base).stdout.strip())
    (site / "project_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run([python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "-q", str(source)], base)
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    return env_dir, elsewhere


def test_installed_modules_come_from_the_new_virtualenv(installed):
    env_dir, elsewhere = installed
    code = ("import train, launchers.config, hydra_plugins.avgbench_sweeper as s, hydra_plugins.avgbench_launcher as l;"
            "print(train.__file__, s.__file__, l.__file__, launchers.config.CONF_DIR, sep='\\n')")
    paths = [Path(p) for p in run([env_dir / "bin" / "python", "-c", code], elsewhere).stdout.split()]
    assert len(paths) == 4 and all(p.is_relative_to(env_dir) for p in paths), paths
    assert (paths[3] / "config.yaml").is_file() and (paths[3] / "strategy" / "ring.yaml").is_file()


def test_hydra_finds_the_installed_sweeper_launcher_and_strategies(installed):
    env_dir, elsewhere = installed
    plugins = run([env_dir / "bin" / "avgbench", "--info", "plugins"], elsewhere).stdout
    assert "hydra_plugins.avgbench_sweeper " in plugins and "hydra_plugins.avgbench_launcher " in plugins, plugins
    assert "BlockSweeper" in plugins, plugins
    assert "InstalledStrategies" in plugins, plugins  # the installed packages' strategies on the search path


def test_avgbench_runs_a_tiny_job_in_the_current_directory(installed):
    env_dir, elsewhere = installed
    result = run([env_dir / "bin" / "avgbench", "model=tiny", "data=synthetic", "max_steps=3", "eval_every=0",
                  "progress=false", "network=loopback", "sampler.interval=0.2"], elsewhere, timeout=180)
    summaries = list((elsewhere / "outputs").glob("*/*/summary.json"))
    assert len(summaries) == 1, result.stdout
    assert "single x1 done" in result.stdout, result.stdout
    report = summaries[0].parent
    assert (report / "peer0").is_dir() and not (ROOT / "outputs" / report.relative_to(elsewhere / "outputs")).exists()


def test_help_names_the_command_and_its_installed_documentation(installed):
    env_dir, elsewhere = installed
    shown = run([env_dir / "bin" / "avgbench", "--help"], elsewhere).stdout
    assert "Usage:  avgbench [GROUP=OPTION ...]" in shown and "train.py" not in shown, shown
    readme = Path(re.search(r"Documentation: (\S+) ", shown)[1])
    assert readme.is_relative_to(env_dir) and (readme.parent / "docs" / "usage.md").is_file(), readme


def test_a_users_avgbench_cli_in_the_working_directory_is_not_the_commands(installed, tmp_path):
    """PYTHONPATH=. puts the working directory on the search path, where the user keeps an avgbench_cli.py."""
    env_dir, _ = installed
    (tmp_path / "avgbench_cli.py").write_text("open('users_cli_ran', 'w').close()\n")
    shown = run([env_dir / "bin" / "avgbench", "--help"], tmp_path, env=os.environ | {"PYTHONPATH": "."}).stdout
    assert "Usage:  avgbench [GROUP=OPTION ...]" in shown and not (tmp_path / "users_cli_ran").exists(), shown


@pytest.fixture(scope="module")
def user_folder(tmp_path_factory) -> Path:
    """A user's folder for PYTHONPATH: their model beside a metrics.py and a train.py named as the tool's modules."""
    folder = tmp_path_factory.mktemp("user")
    (folder / "my_model.py").write_text("from torch import nn\n\n\ndef build(num_classes, channels):\n"
                                        "    return nn.Sequential(nn.AdaptiveAvgPool2d(4), nn.Flatten(), "
                                        "nn.Linear(channels * 16, num_classes))\n")
    (folder / "metrics.py").write_text("")
    (folder / "train.py").write_text(f"open({str(folder / 'users_train_ran')!r}, 'w').close()\n")
    return folder


@pytest.mark.parametrize("target", ["my_model:build", "{user_folder}/my_model.py:build"])
def test_a_users_modules_on_pythonpath_never_replace_the_tools(installed, user_folder, tmp_path, target):
    env_dir, elsewhere = installed
    target = target.format(user_folder=user_folder)
    tiny_run = ["data=synthetic", "max_steps=3", "eval_every=0", "progress=false", "network=loopback"]
    result = run([env_dir / "bin" / "avgbench", "model=custom", f"model.target={target}", *tiny_run,
                  f"hydra.run.dir={tmp_path / 'run'}"], elsewhere, timeout=180,
                 env=os.environ | {"PYTHONPATH": str(user_folder)})
    assert "single x1 done" in result.stdout and (tmp_path / "run" / "summary.json").is_file(), result.stdout
    assert not (user_folder / "users_train_ran").exists()
