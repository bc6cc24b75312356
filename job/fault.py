"""Fault injection at a chosen step of a chosen peer: SIGKILL, an exception, or a stall; the peer first writes
peer<RANK>/fault.json (kinds, step, unix time) for the summary."""
import json
import os
import signal
import time
from pathlib import Path

from omegaconf import DictConfig

from job.errors import ConfigError
from metrics.recording.rundir import PeerDir

FAULT_KINDS = ("kill_peer", "raise_peer", "stall_peer")
ONCE_MARKER = "AVGBENCH_FAULT_ONCE"  # environment: a file path; the fault fires once, in the run that creates it


class InjectedFault(RuntimeError):
    """Raised on purpose by fault.raise_peer."""


def check_fault_config(cfg: DictConfig, workers: int) -> None:
    """workers: how many worker ranks (0..workers-1) the strategy starts."""
    for kind in FAULT_KINDS:
        rank = cfg.fault[kind]
        if rank is not None and not 0 <= int(rank) < workers:
            raise ConfigError(f"fault.{kind}={rank} is not a worker rank (0..{workers - 1})")


def inject(fault_cfg: DictConfig, rank: int, step: int, peer_dir: Path) -> None:
    kinds = [kind for kind in FAULT_KINDS if fault_cfg[kind] == rank] if step == fault_cfg.at_step else []
    if not kinds or not first_time():
        return
    record = {"rank": rank, "kinds": kinds, "step": step, "time": time.time()}
    PeerDir(peer_dir).fault.write_text(json.dumps(record))
    if fault_cfg.stall_peer == rank:
        time.sleep(float(fault_cfg.stall_s))
    if fault_cfg.raise_peer == rank:
        raise InjectedFault(f"injected failure on rank {rank} at step {step} (fault.raise_peer)")
    if fault_cfg.kill_peer == rank:
        os.kill(os.getpid(), signal.SIGKILL)


def first_time() -> bool:
    """False where a one-shot fault (ONCE_MARKER) has fired already; else True, marking it as fired."""
    marker = os.environ.get(ONCE_MARKER)
    if not marker:
        return True
    try:
        with open(marker, "x"):
            return True
    except FileExistsError:
        return False
