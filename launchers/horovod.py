"""horovodrun launcher: `horovodrun -np N <hosts> <launcher_args> python -m job.worker RUN_DIR` starts every rank."""
import re
import signal
import sys

from launchers.base import Launcher, signal_name
from launchers.mpi import SIGNALLED

# How horovodrun (gloo) and mpirun report the first rank that failed.
GLOO_FAILURE = re.compile(r"first process to do so was:\s*Process name: (\d+)\s*Exit code: (\d+)")
MPI_EXIT = re.compile(r"first process to do so was:\s*Process name: \[\[\d+,\d+\],(\d+)\]\s*Exit code:\s*(\d+)")
GLOO_EXIT = re.compile(r"^Process (\d+) exit with status code (\d+)\.", re.MULTILINE)  # one line per failed rank
# What a rank raises when another rank went away first ("you should see the exception ... before the first shutdown").
HOROVOD_SHUTDOWN = "Horovod has been shut down"


def reported_failure(log: str) -> tuple[int, int | None, int | None] | None:
    """(rank, exit code, signal) of the first failed rank as horovodrun or mpirun reported it."""
    if match := SIGNALLED.search(log):
        return int(match[1]), None, int(match[2])
    if match := GLOO_FAILURE.search(log) or MPI_EXIT.search(log):
        code = int(match[2])
        return int(match[1]), code, code - 128 if code > 128 else None
    return None


def signalled_exits(log: str) -> list[tuple[int, int]]:
    """(rank, exit code) of each rank horovodrun (gloo) saw end by a signal other than its own SIGTERM."""
    return [(int(rank), int(code)) for rank, code in GLOO_EXIT.findall(log)
            if int(code) > 128 and int(code) != 128 + signal.SIGTERM]


class HorovodLauncher(Launcher):
    def command(self) -> list[str]:
        hosts = self.placement.horovodrun_args() or self.spec.host_args
        return [sys.executable, "-m", "horovod.runner.launch", "-np", str(self.nprocs), *hosts,
                *self.spec.launcher_args, *self.worker_command()]

    def start(self) -> None:
        env = self.base_env() | self.placement.horovodrun_env()
        self.spawn(None, self.placement.head(self.command()), env)

    def first_failure(self, failed: dict[int | None, int]) -> tuple[int | None, str]:
        """A rank that died without a traceback, as horovodrun names it (the first signalled, if it followed a loss)."""
        log = self.run_dir.launcher_log.read_text(errors="replace")
        if report := reported_failure(log):
            rank, code, signum = report
            silent = [(r, c) for r, c in signalled_exits(log) if not self.left_traceback(r)]
            error = self.run_dir.peer(rank).error  # HOROVOD_SHUTDOWN in it: it followed another rank's loss
            if silent and error.exists() and HOROVOD_SHUTDOWN in error.read_text(errors="replace"):
                (rank, code), signum = silent[0], silent[0][1] - 128
            if not self.left_traceback(rank):
                how = (f"was killed by {signal_name(-signum)}" if signum in set(signal.Signals)
                       else f"exited with code {code}")
                return rank, f"peer rank {rank} {how} (no traceback)"
        return super().first_failure(failed)
