"""Process hygiene shared by launchers and workers: signals, parent death, CPU pinning, tree kills."""
import contextlib
import ctypes
import logging
import os
import signal
import sys
import threading
import time
import traceback
from types import FrameType
from typing import Callable, Collection, Iterable, NoReturn

import psutil

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
RUN_ID_ENV = "AVGBENCH_RUN_ID"


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit (so `finally` blocks run) and keep Ctrl-C as KeyboardInterrupt."""

    def _raise(signum: int, _frame: FrameType | None) -> NoReturn:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _raise)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def exit_with(main: Callable[..., int], *args: object) -> NoReturn:
    """Run `main` and exit with its code at once (exit_now): a backend's thread cannot hold the exit."""
    try:
        code = main(*args)
    except BaseException as exc:
        code = (exc.code if isinstance(exc, SystemExit) and isinstance(exc.code, int)
                else 128 + signal.SIGINT if isinstance(exc, KeyboardInterrupt) else 1)
        if not isinstance(exc, SystemExit):
            traceback.print_exc()
    exit_now(code)


def exit_now(code: int) -> NoReturn:
    """Exit with `code` once output is flushed, without the interpreter's teardown (about a second with torch); a
    finished MPI process finalizes MPI first, as mpi4py's exit handler would (mpirun fails a rank that did not)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if code == 0 and mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM reached the launcher."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def interrupt_on_signals() -> None:
    """Ctrl-C and SIGTERM raise Interrupted once in the main thread; later ones are ignored while peers stop."""

    def _raise(signum: int, _frame: FrameType | None) -> NoReturn:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        raise Interrupted(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _raise)


def die_with_parent(grace_s: float) -> None:
    """End this process when the parent dies (PDEATHSIG), and its tree grace_s later if it is blocked."""
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        time.sleep(grace_s)
        for child in psutil.Process().children(recursive=True):
            child.kill()
        os._exit(1)

    threading.Thread(target=watch, name="avgbench-parent-watch", daemon=True).start()


def adopt_orphans() -> None:
    """Become our descendants' subreaper: reap_orphans() then counts an orphan's CPU among our children's."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def own_children() -> set[int]:
    """The process ids of our children now (before any could leave orphans, only the ones we started)."""
    return {child.pid for child in psutil.Process().children()}


def reap_orphans(keep: Collection[int] = ()) -> None:
    """Wait for every adopted descendant that has ended, never for a child `keep` lists (its Popen waits for it)."""
    for child in psutil.Process().children():
        with contextlib.suppress(ChildProcessError, psutil.NoSuchProcess):
            if child.pid not in keep and child.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(child.pid, 0)


def boot_id() -> str:
    """This kernel's boot id: processes with the same one share the machine's cores (emulated hosts do)."""
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip()


def process_started_at() -> float:
    """Unix time this process started (/proc/self/stat's start time, to a clock tick)."""
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime: clock ticks after boot
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME) + ticks / os.sysconf("SC_CLK_TCK")


def core_slot(index: int, per_slot: int, available: Iterable[int]) -> list[int]:
    """The `index`-th group of `per_slot` cores among `available`, wrapping around when there are fewer."""
    cores = sorted(available)
    return sorted({cores[(index * per_slot + i) % len(cores)] for i in range(per_slot)})


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, e.g. a container's or a batch job's share)."""
    return len(os.sched_getaffinity(0))


def pin_cpus(local_rank: int, peer_cpus: int, available: Iterable[int] | None = None) -> list[int]:
    """Pin this process (and threads it starts) to `peer_cpus` of `available` cores (default: its affinity)."""
    cores = core_slot(local_rank, peer_cpus, available or os.sched_getaffinity(0))
    os.sched_setaffinity(0, cores)
    return cores


def processes_of_run(run_id: str) -> list[psutil.Process]:
    """Every live process carrying this run's id in its environment (peers and their daemons)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get(RUN_ID_ENV) == run_id:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def kill_processes(procs: list[psutil.Process], grace_s: float) -> None:
    """SIGTERM, wait up to grace_s, then SIGKILL what is left."""
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(alive, timeout=grace_s)


def wait_until(predicate: Callable[[], bool], timeout_s: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
