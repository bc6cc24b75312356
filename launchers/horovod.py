"""Horovod launcher: one `horovodrun` (horovod.runner.launch) starts every rank.

    horovodrun -np N -H localhost:N --gloo|--mpi --network-interface lo ... python -m job.worker RUN_DIR

Ranks read HOROVOD_RANK (gloo) or OMPI_COMM_WORLD_RANK (MPI). horovodrun hands
our environment, AVGBENCH_RUN_ID included, to every rank (gloo: `env ...` per
rank; MPI: `mpirun -x` for each variable), so the base launcher's cleanup finds
them all. horovodrun --mpi already passes `-bind-to none -map-by slot` and
--allow-run-as-root; each rank pins itself (job.process.pin_cpus).

Deadlines: each rank waits for its all-reduces at most timeouts.collective_s
(strategies/ring.py); gloo's own timeout is the larger of that and
timeouts.startup_s, as it also bounds the rendezvous.

Security: horovodrun --gloo serves its rendezvous over HTTP on all interfaces
(a random port) for the length of the run; the ranks' traffic stays on
ring.network_interface.
"""
import os
import re
import signal
import sys

from launchers.base import Launcher, signal_name
from strategies.ring import host_list, timeline_path

# Open MPI's tuned all-reduce pinned to its ring algorithm, so the payload is the ring's.
OMPI_RING_ARGS = "--oversubscribe -mca coll_tuned_use_dynamic_rules 1 -mca coll_tuned_allreduce_algorithm 4"
# -H localhost:N hides oversubscription from Open MPI; when the ranks need more cores than
# this host has, ask for what Open MPI does by itself then: yield the core while polling.
OMPI_YIELD_ARGS = "-mca mpi_yield_when_idle 1"

# How horovodrun (gloo) and mpirun report the first rank that failed.
GLOO_FAILURE = re.compile(r"first process to do so was:\s*Process name: (\d+)\s*Exit code: (\d+)")
MPI_SIGNAL = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)")
MPI_EXIT = re.compile(r"first process to do so was:\s*Process name: \[\[\d+,\d+\],(\d+)\]\s*Exit code:\s*(\d+)")


def horovodrun_command(cfg, nprocs: int, run_dir, worker: list[str], placed: list[str] = ()) -> list[str]:
    """placed: hosts and interface from the placement (network=emulated), else ring.hosts / localhost."""
    ring, timeouts = cfg.ring, cfg.timeouts
    gloo_timeout_s = max(1, round(max(float(timeouts.collective_s), float(timeouts.startup_s))))
    hosts = list(placed) or ["-H", host_list(ring.hosts) if ring.hosts else f"localhost:{nprocs}",
                             "--network-interface", ring.network_interface]
    command = [
        sys.executable, "-m", "horovod.runner.launch", "-np", str(nprocs), *hosts, f"--{ring.controller}",
        "--fusion-threshold-mb", str(int(ring.fusion_threshold_mb)),
        "--cycle-time-ms", str(float(ring.cycle_time_ms)),
        "--start-timeout", str(max(1, round(float(timeouts.startup_s)))),
        "--gloo-timeout-seconds", str(gloo_timeout_s),
    ]
    if ring.timeline:
        command += ["--timeline-filename", timeline_path(cfg, run_dir)]
    if ring.controller == "mpi":
        oversubscribed = not (ring.hosts or placed) and nprocs * cfg.peer_cpus > len(os.sched_getaffinity(0))
        command += ["--mpi-args", OMPI_RING_ARGS + (" " + OMPI_YIELD_ARGS if oversubscribed else "")]
    return command + worker


def reported_failure(log: str) -> tuple[int, int | None, int | None] | None:
    """(rank, exit code, signal) of the first failed rank as horovodrun or mpirun reported it."""
    if match := MPI_SIGNAL.search(log):
        return int(match[1]), None, int(match[2])
    if match := GLOO_FAILURE.search(log) or MPI_EXIT.search(log):
        code = int(match[2])
        return int(match[1]), code, code - 128 if code > 128 else None
    return None


class HorovodLauncher(Launcher):
    def start(self) -> None:
        command = horovodrun_command(self.cfg, self.nprocs, self.run_dir, self.worker_command(),
                                     self.placement.horovodrun_args())
        env = self.base_env() | self.placement.horovodrun_env()
        self.spawn(None, self.placement.head(command), env, "launcher.log")

    def first_failure(self, failed: list, codes: dict) -> tuple[int | None, str]:
        """A rank that died without a traceback (e.g. SIGKILL) is the root cause: horovodrun names it."""
        log = (self.run_dir / "launcher.log").read_text(errors="replace")
        report = reported_failure(log)
        if report:
            rank, code, signum = report
            if not self.left_traceback(rank):
                how = (f"was killed by {signal_name(-signum)}" if signum in set(signal.Signals)
                       else f"exited with code {code}")
                return rank, f"peer rank {rank} {how} (no traceback)"
        return super().first_failure(failed, codes)
