"""The launcher's monitor decides a run's outcome from its processes' exit codes and the
peers' error files (unit tier: fake processes, a run directory written here)."""
import os
import subprocess
import threading
import time

import pytest
from omegaconf import OmegaConf

from launchers.base import Launcher
from launchers.horovod import HorovodLauncher, reported_failure
from launchers.mpi import SIGNALLED, MpiLauncher
from metrics.recording.rundir import WORKER, LaunchSpec, RunDir

pytestmark = pytest.mark.timeout(30)

STILL_RUNNING = None


class FakeProcess:
    """Anything with .poll() is a process to the monitor."""

    def __init__(self, code):
        self.code = code

    def poll(self):
        return self.code


def make(launcher_class, tmp_path, codes: dict, tolerate: bool = False):
    """A launcher of this class over fake processes with these exit codes (None: running); its
    kill_session only records the ranks it would have killed."""

    class Watched(launcher_class):
        def start(self):
            pass

        def kill_session(self, rank):
            self.killed.append(rank)

    workers = sum(rank is not None for rank in codes)
    spec = LaunchSpec(roles=[WORKER] * workers, threads=1, batch_size=32, effective_batch=32 * workers,
                      tolerate_peer_loss=tolerate)
    run = RunDir(tmp_path / "run")
    run.path.mkdir(parents=True, exist_ok=True)
    launcher = Watched(OmegaConf.create({"network": {"name": "loopback"}}), run, spec)
    launcher.killed = []
    launcher.procs = {rank: FakeProcess(code) for rank, code in codes.items()}
    return launcher


def write_error(run: RunDir, rank: int, text: str, mtime_ns: int) -> None:
    peer = run.peer(rank)
    peer.path.mkdir(parents=True, exist_ok=True)
    peer.error.write_text(text)
    os.utime(peer.error, ns=(mtime_ns, mtime_ns))


def check(launcher):
    return launcher._check(start=0.0)


# --- Launcher._check and first_failure ----------------------------------------------------
def test_all_exited_zero_is_completed(tmp_path):
    outcome = check(make(Launcher, tmp_path, {0: 0, 1: 0, 2: 0}))
    assert (outcome.status, outcome.exit_code, outcome.failed_rank, outcome.lost_peers) == ("completed", 0, None, [])


def test_running_without_failure_is_undecided(tmp_path):
    assert check(make(Launcher, tmp_path, {0: 0, 1: STILL_RUNNING})) is None


def test_earliest_error_file_is_the_root_cause_not_the_lowest_rank(tmp_path):
    launcher = make(Launcher, tmp_path, {0: 1, 1: STILL_RUNNING, 2: 1})
    # rank 0's error is written last to disk here, but rank 2 failed first (mtime_ns)
    write_error(launcher.run_dir, 2, "rank 2 failed: the root cause", mtime_ns=1_000_000_000_000_000_100)
    write_error(launcher.run_dir, 0, "rank 0 failed: a consequence", mtime_ns=1_000_000_000_000_000_200)
    outcome = check(launcher)
    assert outcome.status == "failed" and outcome.exit_code == 1
    assert outcome.failed_rank == 2 and outcome.error == "rank 2 failed: the root cause"
    assert sorted(outcome.lost_peers) == [0, 2]


def test_nanoseconds_decide_between_errors_of_the_same_second(tmp_path):
    launcher = make(Launcher, tmp_path, {0: 1, 1: 1})
    write_error(launcher.run_dir, 0, "later", mtime_ns=1_700_000_000_000_000_002)
    write_error(launcher.run_dir, 1, "earlier", mtime_ns=1_700_000_000_000_000_001)
    assert check(launcher).failed_rank == 1


def test_peer_killed_by_a_signal_without_traceback_is_the_root_cause(tmp_path):
    # rank 1 was SIGKILLed; rank 0 then timed out waiting for it and wrote an error
    launcher = make(Launcher, tmp_path, {0: 1, 1: -9, 2: STILL_RUNNING})
    write_error(launcher.run_dir, 0, "rank 0 failed: gloo all_reduce timed out", mtime_ns=10**18)
    outcome = check(launcher)
    assert outcome.failed_rank == 1
    assert outcome.error == "peer rank 1 was killed by SIGKILL (no traceback)"


def test_signalled_peer_with_a_traceback_is_not_taken_for_a_killed_one(tmp_path):
    # rank 1 died by SIGTERM after it had written its traceback; rank 0's error is earlier
    launcher = make(Launcher, tmp_path, {0: 1, 1: -15})
    write_error(launcher.run_dir, 0, "rank 0 failed first", mtime_ns=10**18)
    write_error(launcher.run_dir, 1, "rank 1 failed later", mtime_ns=10**18 + 5)
    outcome = check(launcher)
    assert (outcome.failed_rank, outcome.error) == (0, "rank 0 failed first")


def test_failure_without_any_error_file_names_the_exit_code(tmp_path):
    launcher = make(Launcher, tmp_path, {0: STILL_RUNNING, 1: 3})
    outcome = check(launcher)
    assert outcome.failed_rank == 1 and outcome.error.startswith("peer rank 1 exited with code 3")


def test_failed_launcher_process_is_named_as_such(tmp_path):
    launcher = make(Launcher, tmp_path, {None: 2})
    outcome = check(launcher)
    assert outcome.status == "failed" and outcome.failed_rank is None
    assert outcome.error.startswith("the launcher process exited with code 2")


def test_tolerated_peer_loss_keeps_the_run_going_and_records_the_lost_peer(tmp_path):
    launcher = make(Launcher, tmp_path, {0: STILL_RUNNING, 1: -9, 2: STILL_RUNNING}, tolerate=True)
    assert check(launcher) is None
    assert launcher.killed == [1]  # what the lost peer left running is ended at once
    assert check(launcher) is None
    assert launcher.killed == [1]  # ... once
    launcher.procs[0].code = launcher.procs[2].code = 0
    outcome = check(launcher)
    assert (outcome.status, outcome.exit_code, outcome.lost_peers) == ("completed", 0, [1])


def test_tolerance_ends_when_every_peer_is_lost(tmp_path):
    outcome = check(make(Launcher, tmp_path, {0: 1, 1: -9}, tolerate=True))
    assert outcome.status == "failed" and sorted(outcome.lost_peers) == [0, 1]


def test_without_tolerance_one_lost_peer_fails_the_run(tmp_path):
    launcher = make(Launcher, tmp_path, {0: STILL_RUNNING, 1: -9, 2: STILL_RUNNING})
    outcome = check(launcher)
    assert outcome.status == "failed" and outcome.failed_rank == 1 and outcome.lost_peers == [1]


# --- what mpirun and horovodrun print about the first failed rank ----------------------------
MPIRUN_SIGNAL_LOG = """\
[1,0]<stdout>:step 3
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
--------------------------------------------------------------------------
mpirun noticed that process rank 2 with PID 48213 on node worker-7 exited on signal 9 (Killed).
--------------------------------------------------------------------------
"""
MPIRUN_EXIT_LOG = """\
--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[30512,1],1]
  Exit code:    3
--------------------------------------------------------------------------
"""
HOROVOD_GLOO_LOG = """\
[0]<stderr>:Traceback (most recent call last):
Process 1 exit with status code 137.
Terminating remaining workers after failure of Process 1.
RuntimeError: Horovod detected that one or more processes exited with non-zero status, thus causing the job \
to be terminated. The first process to do so was:
Process name: 1
Exit code: 137
"""


@pytest.mark.parametrize("log, expected", [
    (MPIRUN_SIGNAL_LOG, (2, None, 9)),
    (MPIRUN_EXIT_LOG, (1, 3, None)),
    (HOROVOD_GLOO_LOG, (1, 137, 9)),  # 128 + SIGKILL
    (HOROVOD_GLOO_LOG.replace("137", "2"), (1, 2, None)),
    ("all ranks finished\n", None),
])
def test_reported_failure_reads_horovodrun_and_mpirun_logs(log, expected):
    assert reported_failure(log) == expected


def test_mpirun_signal_line_is_matched_with_rank_and_signal():
    match = SIGNALLED.search(MPIRUN_SIGNAL_LOG)
    assert (int(match.group(1)), int(match.group(2))) == (2, 9)
    assert SIGNALLED.search(MPIRUN_EXIT_LOG) is None


# horovodrun saw rank 1 exit first, but rank 1 only raised Horovod's shutdown error after rank 2 was killed.
HOROVOD_RACE_LOG = """\
Process 1 exit with status code 1.
Terminating remaining workers after failure of Process 1.
Process 0 exit with status code 143.
Process 2 exit with status code 137.
RuntimeError: Horovod detected that one or more processes exited with non-zero status, thus causing the job \
to be terminated. The first process to do so was:
Process name: 1
Exit code: 1
"""
SHUTDOWN_ERROR = ("rank 1 failed: horovod.common.exceptions.HorovodInternalError: Horovod has been shut down. This was "
                  "caused by an exception on one of the ranks")




@pytest.mark.parametrize("launcher_class, log, errors, expected", [
    (MpiLauncher, MPIRUN_SIGNAL_LOG, {0: "rank 0 failed: MPI recv timed out"},
     (2, "peer rank 2 was killed by SIGKILL (no traceback; reported by mpirun)")),
    (MpiLauncher, MPIRUN_SIGNAL_LOG, {2: "rank 2 failed: InjectedFault"}, (2, "rank 2 failed: InjectedFault")),
    (HorovodLauncher, HOROVOD_GLOO_LOG, {0: "rank 0 failed: Horovod all-reduce not done"},
     (1, "peer rank 1 was killed by SIGKILL (no traceback)")),
    (HorovodLauncher, HOROVOD_RACE_LOG, {1: SHUTDOWN_ERROR}, (2, "peer rank 2 was killed by SIGKILL (no traceback)")),
    (HorovodLauncher, HOROVOD_RACE_LOG, {1: "rank 1 failed: InjectedFault"}, (1, "rank 1 failed: InjectedFault")),
    (HorovodLauncher, HOROVOD_GLOO_LOG.replace("137", "2"), {}, (1, "peer rank 1 exited with code 2 (no traceback)")),
], ids=["mpirun-names-the-killed-rank", "mpi-traceback-wins", "horovodrun-names-the-killed-rank",
        "horovod-shutdown-follower-exited-first", "horovod-real-error-exited-first", "horovodrun-plain-exit-code"])
def test_launcher_names_the_root_cause_from_its_log(tmp_path, launcher_class, log, errors, expected):
    launcher = make(launcher_class, tmp_path, {None: 1})
    launcher.run_dir.launcher_log.write_text(log)
    for rank, text in errors.items():
        write_error(launcher.run_dir, rank, text, mtime_ns=10**18)
    outcome = check(launcher)
    assert (outcome.failed_rank, outcome.error) == expected


class EndingProcess:
    """A process that ends (exit code 0) when `ended` is set; wait() returns then, as Popen.wait does."""

    def __init__(self):
        self.ended = threading.Event()

    def poll(self):
        return 0 if self.ended.is_set() else None

    def wait(self, timeout):
        if not self.ended.wait(timeout):
            raise subprocess.TimeoutExpired("peer", timeout)
        return 0


def test_the_monitor_sees_a_process_end_at_once(tmp_path):
    """The monitor's wait between checks ends with the process it waits for, not after its period."""
    launcher = make(Launcher, tmp_path, {})
    launcher.procs = {0: EndingProcess()}
    threading.Timer(0.2, launcher.procs[0].ended.set).start()
    started = time.monotonic()
    launcher.wait_for_an_end(10.0)
    assert launcher.procs[0].poll() == 0 and time.monotonic() - started < 5.0
