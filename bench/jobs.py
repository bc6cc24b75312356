"""Run one avgbench job from a benchmark and read what it left behind."""
import json
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from metrics.rundir import RunDir

ROOT = Path(__file__).resolve().parent.parent


def averaging_strategies(tweaks: dict[str, list[str]] | None = None,
                         skip: dict[str, str] | None = None) -> dict[str, list[str]]:
    """Every averaging strategy of the registry (conf/strategy/*.yaml, baselines left out) -> its overrides:
    strategy=NAME plus the benchmark's tweaks for it; `skip` names those a benchmark cannot measure, with why."""
    from job.registry import resolve
    from launchers.config import CONF_DIR, group_options
    from omegaconf import OmegaConf

    chosen = {}
    for name in group_options("strategy"):
        strategy = resolve(OmegaConf.load(CONF_DIR / "strategy" / f"{name}.yaml").strategy.target)
        if name not in (skip or {}) and not strategy.is_baseline:
            chosen[name] = [f"strategy={name}", *(tweaks or {}).get(name, [])]
    return chosen


@contextmanager
def train(*overrides: str, timeout: float = 900):
    """Run train.py with overrides in a temporary run directory; yields the directory."""
    with tempfile.TemporaryDirectory() as tmp:
        result = subprocess.run([sys.executable, "train.py", f"hydra.run.dir={tmp}", "progress=false", *overrides],
                                cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        if result.returncode:
            raise RuntimeError(f"train.py {' '.join(overrides)} failed:\n{result.stderr[-2000:]}")
        yield Path(tmp)


def summary_of(*overrides: str, timeout: float = 900) -> dict:
    with train(*overrides, timeout=timeout) as run_dir:
        return json.loads(RunDir(run_dir).summary.read_text())
