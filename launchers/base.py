"""A launcher starts the run's processes; the shared monitor ends the run at the first failure (its rank and
traceback reported) and at the end kills every process with the run's id."""
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from omegaconf import DictConfig

from job.process import RUN_ID_ENV, adopt_orphans, kill_processes, own_children, processes_of_run, reap_orphans
from launchers.placement import PlacementError, make_placement
from launchers.progress import Progress
from metrics.recording.machine import MachineSampler
from metrics.recording.rundir import LaunchSpec, PeerDir, RunDir
from netemu.cpu import CgroupUnavailable, CpuGroups

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Outcome:
    status: str  # completed | failed | interrupted
    exit_code: int
    wall_s: float
    failed_rank: int | None = None
    error: str | None = None
    lost_peers: list[int] = field(default_factory=list)
    ended_at: float = field(default_factory=time.time)  # unix time the outcome was decided


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


class Launcher(ABC):
    """Starts the processes a LaunchSpec describes; `run()` monitors them to the end."""

    def __init__(self, cfg: DictConfig, run: RunDir, spec: LaunchSpec):
        self.cfg, self.run_dir, self.spec = cfg, run, spec
        self.nprocs = spec.processes
        self.run_id = uuid.uuid4().hex
        self.procs: dict[int | None, subprocess.Popen] = {}  # rank (None: a launcher process) -> process
        self.reaped: set[int] = set()  # lost peers whose sessions were killed
        self.own: set[int] = set()  # the children the launcher started (peers, link and CPU helpers)
        self.placement = make_placement(cfg, run, self.nprocs, spec.threads)  # where each rank lives on the network
        self.cpu_groups = CpuGroups(cfg, run, self.run_id, spec.threads, self.nprocs)  # and on which CPU share
        self.peers_started_at: float | None = None  # unix time it began starting the peers

    def base_env(self) -> dict[str, str]:
        env = dict(os.environ) | self.spec.env
        env[RUN_ID_ENV] = self.run_id
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
        env["OMP_NUM_THREADS"] = str(self.spec.threads)
        return env

    def worker_command(self) -> list[str]:
        return [sys.executable, "-m", "job.worker", str(self.run_dir.path)]

    def spawn(self, rank: int | None, command: list[str], env: dict[str, str]) -> None:
        """Start one process in its own session, its output into launcher.log (a peer redirects its own)."""
        with open(self.run_dir.launcher_log, "ab") as log:
            self.procs[rank] = subprocess.Popen(command, env=env, cwd=PROJECT_ROOT, stdout=log,
                                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                start_new_session=True)

    @abstractmethod
    def start(self) -> None:
        """Spawn the run's processes into self.procs."""

    def run(self, window: tuple[int, int] | None = None) -> Outcome:
        start = time.monotonic()
        adopt_orphans()  # so that daemons whose parent ended first count as the run's CPU, not others'
        machine = MachineSampler(self.run_dir.machine)  # from before the first process to after the last
        machine.start()
        progress = Progress(self.run_dir.path, self.cfg, window)
        outcome = None
        try:
            self.cpu_groups.start()
            self.placement.start(self.base_env())
            helpers = own_children()  # link and CPU helpers, started before any peer could leave an orphan
            self.peers_started_at = time.time()
            self.start()
            self.own = helpers | {proc.pid for proc in self.procs.values()}
            while outcome is None:
                self.wait_for_an_end(0.2)
                progress.update()
                outcome = self._check(start)
        except KeyboardInterrupt as exc:
            signum = getattr(exc, "signum", signal.SIGINT)
            outcome = Outcome("interrupted", 128 + signum, time.monotonic() - start,
                              error=f"interrupted by {signal.Signals(signum).name}")
        except (PlacementError, CgroupUnavailable) as exc:
            outcome = Outcome("failed", 1, time.monotonic() - start, error=str(exc))
        finally:
            progress.close()
            self.stop_all()
            self.cpu_groups.close()
            self.placement.close()
            reap_orphans()
            machine.stop()
        if outcome.error and self.cfg.launch.nnodes > 1:
            launch = self.cfg.launch
            node = f"node {socket.gethostname()} (node rank {launch.node_rank} of {launch.nnodes})"
            outcome.error = f"{node}: {outcome.error}"
        return outcome

    def _check(self, start: float) -> Outcome | None:
        codes = {rank: proc.poll() for rank, proc in self.procs.items()}
        reap_orphans(keep=self.own)  # what an ended process left behind goes now, not when the run ends
        failed = {rank: code for rank, code in codes.items() if code}  # rank -> its exit code, not 0
        lost = [rank for rank in failed if rank is not None]
        if failed and not (self.spec.tolerate_peer_loss and None not in failed and len(lost) < len(codes)):
            rank, message = self.first_failure(failed)
            return Outcome("failed", 1, time.monotonic() - start, failed_rank=rank, error=message, lost_peers=lost)
        for rank in set(lost) - self.reaped:  # the run goes on: end what the lost peer left running now
            self.kill_session(rank)
            self.reaped.add(rank)
        if all(code is not None for code in codes.values()):
            return Outcome("completed", 0, time.monotonic() - start, lost_peers=lost)
        return None

    def wait_for_an_end(self, timeout_s: float) -> None:
        """Up to timeout_s, and no longer than a running process lives (the last one's end is seen at once)."""
        running = next((proc for proc in self.procs.values() if proc.poll() is None), None)
        if running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                running.wait(timeout_s)

    def kill_session(self, rank: int) -> None:
        """SIGKILL the session a peer was started in (it and every process it left behind)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.procs[rank].pid, signal.SIGKILL)

    def left_traceback(self, rank: int) -> bool:
        return self.run_dir.peer(rank).error.exists()

    def first_failure(self, failed: dict[int | None, int]) -> tuple[int | None, str]:
        """The root cause: the earliest traceback any peer wrote, else the first dead process."""
        errors = sorted(self.run_dir.errors(), key=lambda p: p.stat().st_mtime_ns)
        killed = [r for r, code in failed.items() if r is not None and code < 0 and not self.left_traceback(r)]
        if killed:  # a peer killed by a signal leaves no traceback; the others' errors follow from it
            return killed[0], f"peer rank {killed[0]} was killed by {signal_name(failed[killed[0]])} (no traceback)"
        if errors:
            return PeerDir(errors[0].parent).rank, errors[0].read_text()
        rank = next(iter(failed))
        who = f"peer rank {rank}" if rank is not None else "the launcher process"
        logs = [self.run_dir.launcher_log] + ([self.run_dir.peer(rank).output_log] if rank is not None else [])
        return rank, f"{who} exited with code {failed[rank]}; see {' and '.join(map(str, logs))}"

    def stop_all(self) -> None:
        """Stop every process of this run: our children's trees, then anything else with the run's id."""
        grace = float(self.cfg.timeouts.shutdown_s)
        tree = []
        for proc in self.procs.values():
            with contextlib.suppress(psutil.NoSuchProcess):
                parent = psutil.Process(proc.pid)
                tree += [parent, *parent.children(recursive=True)]
        kill_processes(tree, grace)
        kill_processes(processes_of_run(self.run_id), grace)
        for proc in self.procs.values():
            proc.wait()

