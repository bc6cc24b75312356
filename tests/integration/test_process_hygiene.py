"""A crashed or killed peer ends the run with its rank; Ctrl-C stops it; nothing is left running."""
import os
import signal
import subprocess
import sys

import pytest

from helpers import ROOT, assert_no_leftovers, run_train, start_train, summary_of, wait_for_steps
from metrics.recording.jsonl import read_jsonl

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

THREE = ["strategy=allreduce", "peers=3", "max_steps=500", "fault.at_step=6"]


def test_raising_peer_ends_run_with_rank_and_traceback(run_dir):
    result = run_train(run_dir, *THREE, "fault.raise_peer=1")
    assert result.returncode == 1
    assert "rank 1" in result.stderr and "InjectedFault" in result.stderr and "Traceback" in result.stderr
    assert_no_leftovers(run_dir)
    for rank in range(3):  # metrics so far are kept
        assert len(read_jsonl(run_dir / f"peer{rank}" / "steps.jsonl")) >= 5
    summary = summary_of(run_dir)
    assert summary["status"] == "failed" and summary["failed_rank"] == 1
    assert summary["fault"]["kinds"] == ["raise_peer"] and not summary["fault"]["survived"]
    assert 0 < summary["fault"]["run_ended_after_s"] < 60


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_stops_everything(run_dir, sig):
    # Started the way a script starts a background job (SIGINT ignored): Ctrl-C must still stop the run.
    proc = start_train(run_dir, "strategy=allreduce", "peers=2", "max_steps=100000", preexec_fn=ignore_sigint)
    wait_for_steps(run_dir, 0, 3)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)  # drain the pipes while waiting
    assert proc.returncode == 128 + sig, stderr
    assert f"interrupted by {sig.name}" in stderr
    assert_no_leftovers(run_dir)
    assert read_jsonl(run_dir / "peer0" / "steps.jsonl")
    summary = summary_of(run_dir)
    assert summary["status"] == "interrupted" and summary["exit_code"] == 128 + sig


def test_killed_launcher_takes_its_peers_along(run_dir):
    proc = start_train(run_dir, "strategy=allreduce", "peers=2", "max_steps=100000")
    wait_for_steps(run_dir, 1, 3)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert_no_leftovers(run_dir, settle_s=15)


LINGERING = """
import threading, time
from job.process import exit_with

def main():
    threading.Thread(target=time.sleep, args=(3600,), name="a backend's").start()  # not a daemon thread
    raise RuntimeError("setup failed")

exit_with(main)
"""


def test_a_failed_peer_exits_though_a_backend_left_a_thread_running():
    """hivemind's optimizer, failing half-built, leaves its progress tracker's thread; Python's exit would wait for
    it, and the launcher for the peer, forever (seen on a GPU machine; the worker's entry point runs exit_with)."""
    done = subprocess.run([sys.executable, "-c", LINGERING], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "RuntimeError: setup failed" in done.stderr
