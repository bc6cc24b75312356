import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from job.process import processes_of_run  # noqa: E402
from metrics.jsonl import read_jsonl  # noqa: E402

# Small and quick: the tiny CNN on digits, frequent samples.
QUICK = ["model=tiny", "eval_every=10", "sampler.interval=0.2", "progress=false"]


def train_command(run_dir: Path, *overrides: str) -> list[str]:
    return [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run_dir}", *QUICK, *overrides]


def run_train(run_dir: Path, *overrides: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(train_command(run_dir, *overrides), cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def start_train(run_dir: Path, *overrides: str, **popen) -> subprocess.Popen:
    return subprocess.Popen(train_command(run_dir, *overrides), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, **popen)


def wait_for_steps(run_dir: Path, rank: int, count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while len(read_jsonl(run_dir / f"peer{rank}" / "steps.jsonl")) < count:
        assert time.monotonic() < deadline, f"peer{rank} did not reach {count} steps"
        time.sleep(0.2)


def leftover_processes(run_dir: Path) -> list:
    """Processes still carrying the run's id (workers, daemons, MPI helpers)."""
    run_id = (run_dir / ".avgbench" / "run_id").read_text()
    return processes_of_run(run_id)


def assert_no_leftovers(run_dir: Path, settle_s: float = 5.0) -> None:
    deadline = time.monotonic() + settle_s
    while (left := leftover_processes(run_dir)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"processes left behind: {[(p.pid, p.name()) for p in left]}"


@pytest.fixture
def run_dir(tmp_path):
    yield tmp_path / "run"
    if (tmp_path / "run" / ".avgbench" / "run_id").exists():  # never leak processes into the next test
        for proc in leftover_processes(tmp_path / "run"):
            os.kill(proc.pid, signal.SIGKILL)
