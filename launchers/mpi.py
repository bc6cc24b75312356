"""MPI launcher: one `mpirun` (Open MPI) starts every peer; a rank a signal killed is read from mpirun's output."""
import os
import re
import shutil

from job.process import RUN_ID_ENV
from launchers.base import Launcher, signal_name

EXPORTED = (RUN_ID_ENV, "PYTHONPATH", "OMP_NUM_THREADS", "PATH", "LD_LIBRARY_PATH")
SIGNALLED = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)")


class MpiLauncher(Launcher):
    def command(self, env: dict[str, str]) -> list[str]:
        command = [shutil.which("mpirun") or "mpirun", "-np", str(self.nprocs),
                   "--bind-to", "none", "--oversubscribe", "--tag-output"]
        command += ["--allow-run-as-root"] if os.geteuid() == 0 else []
        if hostfile := self.cfg.launch.get("hostfile"):
            command += ["--hostfile", str(hostfile)]
        elif placed := self.placement.mpirun_args():  # network=emulated: rank r on emulated host r
            command += placed
        else:  # this host only: keep MPI's own traffic on loopback
            command += ["--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"]
        command += self.spec.launcher_args
        for name in [*EXPORTED, *self.spec.env]:
            if name in env:
                command += ["-x", name]
        return command + self.worker_command()

    def start(self) -> None:
        env = self.base_env() | self.placement.head_env()
        self.spawn(None, self.placement.head(self.command(env)), env)

    def first_failure(self, failed: dict[int | None, int]) -> tuple[int | None, str]:
        """A rank killed by a signal, as mpirun reports it, else the base rules (earliest error.txt)."""
        log = self.run_dir.launcher_log
        match = SIGNALLED.search(log.read_text(errors="replace")) if log.exists() else None
        if match:
            rank, signum = int(match.group(1)), int(match.group(2))
            if not self.left_traceback(rank):
                return rank, f"peer rank {rank} was killed by {signal_name(-signum)} (no traceback; reported by mpirun)"
        return super().first_failure(failed)

