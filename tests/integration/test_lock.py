"""The machine lock (launchers/lock.py): a sweep or benchmark waits for (or refuses beside) another one that
holds it, names the holder, and the runs it starts (jobs, baselines) run under it without waiting for it.

The lock file is the test's own (AVGBENCH_LOCK_PATH), never the machine's."""
import os
import subprocess
import sys
import threading
import time

import pytest

from helpers import QUICK, ROOT, summary_of
from job.process import wait_until
from launchers.lock import HOLDER_ENV, PATH_ENV, MachineLock, status


@pytest.fixture
def held_lock(tmp_path, monkeypatch):
    """This test process holds a lock file of its own; processes it starts are not part of its holding."""
    monkeypatch.setenv(PATH_ENV, str(tmp_path / "machine.lock"))
    lock = MachineLock()
    lock.acquire("wait")
    env = {k: v for k, v in os.environ.items() if k != HOLDER_ENV}
    yield lock, env
    lock.release()


def sweep(tmp_path, env, *overrides: str) -> list[str]:
    return [sys.executable, str(ROOT / "train.py"), "-m", f"hydra.sweep.dir={tmp_path / 'sweep'}", *QUICK,
            "max_steps=2", "eval_every=0", "repeats=1", *overrides]


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_refuse_exits_2_naming_the_holder(tmp_path, held_lock):
    _, env = held_lock
    holder = f"is held by pid {os.getpid()} ("
    done = subprocess.run(sweep(tmp_path, env, "lock=refuse"), env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=100, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    line = next(line for line in done.stderr.splitlines() if holder in line)
    assert line.startswith(f"avgbench: the machine lock {tmp_path / 'machine.lock'} is held by pid") and \
        "lock=refuse" in line
    assert not list(tmp_path.rglob(".avgbench"))  # no run started
    bench = subprocess.run([sys.executable, str(ROOT / "bench" / "run.py"), "--lock", "refuse", "noise"], env=env,
                           cwd=ROOT, capture_output=True, text=True, timeout=100, stdin=subprocess.DEVNULL)
    assert bench.returncode == 2 and holder in bench.stderr


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_a_sweep_waits_then_runs_its_jobs_and_baselines_under_the_lock(tmp_path, held_lock):
    lock, env = held_lock
    proc = subprocess.Popen(sweep(tmp_path, env, "strategy=single", "peers=2"), env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    lines = []  # its stderr, line by line as it comes

    def read() -> None:
        for line in proc.stderr:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert wait_until(lambda: any("waiting for it" in line for line in lines) or proc.poll() is not None, 60)
        time.sleep(3)  # at the lock: long enough to have started a job, were it not waiting
        assert proc.poll() is None and not list(tmp_path.rglob(".avgbench")), "".join(lines)  # no run started
        lock.release()
        proc.wait(timeout=150)
        reader.join(timeout=10)
    finally:
        proc.kill()
    err = "".join(lines)
    assert proc.returncode == 0, err
    assert f"avgbench: the machine lock {tmp_path / 'machine.lock'} is held by pid {os.getpid()} (" in err
    assert "waiting for it" in err
    job = summary_of(tmp_path / "sweep" / "block0" / "strategy=single")
    baseline = summary_of(tmp_path / "sweep" / "block0" / "baseline_1x1")  # started by the sweep, under its lock
    for summary in (job, baseline):
        assert summary["status"] == "completed"
        assert summary["machine"]["lock"]["under_lock"] is True
        assert summary["machine"]["lock"]["holder"]["pid"] == proc.pid
    assert status("wait")["holder"] is None  # released at the end
