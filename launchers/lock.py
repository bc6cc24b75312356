"""The machine lock (docs/usage.md): a flocked file naming its holder, so that two sweeps do not measure each other."""
import contextlib
import fcntl
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

LOCK_MODES = ("wait", "refuse", "off")
PATH_ENV = "AVGBENCH_LOCK_PATH"
HOLDER_ENV = "AVGBENCH_LOCK_HOLDER"
DEFAULT_PATH = "/tmp/avgbench-machine.lock"


class LockRefused(RuntimeError):
    """lock=refuse and another process holds the machine lock; the message names it."""


def lock_path() -> Path:
    return Path(os.environ.get(PATH_ENV, DEFAULT_PATH))


def _holder(fd: int) -> dict[str, Any] | None:
    try:
        return json.loads(os.pread(fd, 4096, 0) or b"null")
    except ValueError:
        return None  # being written


def status(mode: str) -> dict[str, Any]:
    """The lock as a run starts: who holds it, and whether this run is part of what holds it (summary.json)."""
    path, holder = lock_path(), None
    if path.exists():
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)  # nobody holds it
        except BlockingIOError:
            holder = _holder(fd)
        finally:
            os.close(fd)
    mine = bool(holder and str(holder["pid"]) in (os.environ.get(HOLDER_ENV), str(os.getpid())))
    return {"mode": mode, "path": str(path), "holder": holder, "under_lock": mine}


class MachineLock:
    """`acquire(mode)` once; `release()` at the end (or the process's exit releases it)."""

    def __init__(self) -> None:
        self.fd: int | None = None

    def acquire(self, mode: str) -> None:
        """Take the lock: lock=wait waits for its holder, lock=refuse raises LockRefused, lock=off does nothing."""
        if self.fd is not None or mode == "off" or status(mode)["under_lock"]:  # ours already, or a parent's
            return
        path = lock_path()
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        with contextlib.suppress(PermissionError):  # someone else's file: still lockable
            os.fchmod(fd, 0o666)  # other users' sweeps open it too
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            who = f"pid {holder['pid']} ({holder['command']}) since {holder['since']}" if holder else "another process"
            line = f"avgbench: the machine lock {path} is held by {who}"
            if mode == "refuse":
                os.close(fd)
                raise LockRefused(f"{line}; lock=refuse, so not starting (lock=wait waits for it)")
            print(f"{line}; waiting for it (lock=refuse: exit instead; lock=off: run beside it)",
                  file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        me = {"pid": os.getpid(), "command": " ".join(sys.argv)[:300], "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        self.fd = fd
        os.environ[HOLDER_ENV] = str(os.getpid())

    def release(self) -> None:
        if self.fd is None:
            return
        os.ftruncate(self.fd, 0)
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None
        os.environ.pop(HOLDER_ENV, None)


SWEEP_LOCK = MachineLock()  # a multirun takes it before it writes anything (launchers/sweeper.py), to the end


def take_sweep_lock(mode: str) -> None:
    """The multirun's lock, before its plan or first job is written: exit 2 with the holder for lock=refuse."""
    try:
        SWEEP_LOCK.acquire(mode)
    except LockRefused as exc:
        print(exc, file=sys.stderr)
        sys.exit(2)

