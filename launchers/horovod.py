"""horovodrun launcher: one `horovodrun` (horovod.runner.launch) starts every rank.

    horovodrun -np N <hosts> <the strategy's launcher_args> python -m job.worker RUN_DIR

<hosts> come from the network placement (network=emulated) or else the spec's host_args.
Ranks read HOROVOD_RANK (gloo) or OMPI_COMM_WORLD_RANK (MPI). horovodrun hands our
environment, AVGBENCH_RUN_ID included, to every rank (gloo: `env ...` per rank; MPI:
`mpirun -x` for each variable), so the base launcher's cleanup finds them all.
"""
import re
import signal
import sys

from launchers.base import Launcher, signal_name

# How horovodrun (gloo) and mpirun report the first rank that failed.
GLOO_FAILURE = re.compile(r"first process to do so was:\s*Process name: (\d+)\s*Exit code: (\d+)")
MPI_SIGNAL = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)")
MPI_EXIT = re.compile(r"first process to do so was:\s*Process name: \[\[\d+,\d+\],(\d+)\]\s*Exit code:\s*(\d+)")


def reported_failure(log: str) -> tuple[int, int | None, int | None] | None:
    """(rank, exit code, signal) of the first failed rank as horovodrun or mpirun reported it."""
    if match := MPI_SIGNAL.search(log):
        return int(match[1]), None, int(match[2])
    if match := GLOO_FAILURE.search(log) or MPI_EXIT.search(log):
        code = int(match[2])
        return int(match[1]), code, code - 128 if code > 128 else None
    return None


class HorovodLauncher(Launcher):
    def command(self) -> list[str]:
        hosts = self.placement.horovodrun_args() or self.spec.host_args
        return [sys.executable, "-m", "horovod.runner.launch", "-np", str(self.nprocs), *hosts,
                *self.spec.launcher_args, *self.worker_command()]

    def start(self) -> None:
        env = self.base_env() | self.placement.horovodrun_env()
        self.spawn(None, self.placement.head(self.command()), env)

    def first_failure(self, failed: list, codes: dict) -> tuple[int | None, str]:
        """A rank that died without a traceback (e.g. SIGKILL) is the root cause: horovodrun names it."""
        report = reported_failure(self.run_dir.launcher_log.read_text(errors="replace"))
        if report:
            rank, code, signum = report
            if not self.left_traceback(rank):
                how = (f"was killed by {signal_name(-signum)}" if signum in set(signal.Signals)
                       else f"exited with code {code}")
                return rank, f"peer rank {rank} {how} (no traceback)"
        return super().first_failure(failed, codes)
