"""The one Strategy interface every averaging backend implements.

The training loop is the same for all strategies: it computes gradients, then
calls `step()`. The strategy owns all communication and the optimizer update,
and says what it cost. Process launch and rendezvous live in `launchers/`.
"""
import os
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch
from torch import nn


@dataclass
class PeerContext:
    """Who this process is, from the torchrun environment contract."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    run_dir: Path

    @classmethod
    def from_env(cls, run_dir: Path) -> "PeerContext":
        """torchrun's variables, else those of the launcher that started us (Open MPI, Horovod, PMI)."""

        def first(names: tuple[str, ...], default: str) -> str:
            return next((os.environ[n] for n in names if n in os.environ), default)

        return cls(
            rank=int(first(("RANK", "OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "PMI_RANK"), "0")),
            world_size=int(first(("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "HOROVOD_SIZE", "PMI_SIZE"), "1")),
            local_rank=int(first(("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "HOROVOD_LOCAL_RANK"), "0")),
            master_addr=first(("MASTER_ADDR",), "127.0.0.1"),
            master_port=int(first(("MASTER_PORT",), "0")),
            run_dir=run_dir,
        )

    @property
    def peer_dir(self) -> Path:
        return self.run_dir / f"peer{self.rank}"


@dataclass
class StepReport:
    """What one `step()` cost this peer.

    comm_s: time blocked in communication (waiting for others included).
    opt_s: time in the local optimizer update.
    bytes_sent / bytes_recv: payload bytes this peer put on / took off the
    transport, from exact accounting of the tensors it exchanged.
    extra: strategy-specific per-step fields (e.g. hivemind's epoch).
    """

    comm_s: float = 0.0
    opt_s: float = 0.0
    bytes_sent: int = 0
    bytes_recv: int = 0
    extra: dict = field(default_factory=dict)


class Strategy(ABC):
    name: ClassVar[str]
    uses_transport: ClassVar[bool] = False  # runs over the top-level `transport` (gloo | mpi)

    # --- decided before any process starts -------------------------------
    @classmethod
    def knobs(cls, cfg) -> dict:
        """This strategy's settings: its own `NAME:` block, plus the transport it runs over."""
        from omegaconf import OmegaConf

        block = cfg.get(cls.name)
        knobs = OmegaConf.to_container(block, resolve=True) if block is not None else {}
        return {"transport": cfg.transport, **knobs} if cls.uses_transport else knobs

    @classmethod
    def validate(cls, cfg) -> None:
        """Raise job.errors.ConfigError for bad knobs."""

    @classmethod
    def check_available(cls, cfg) -> None:
        """Raise job.errors.BackendUnavailable (why + how to fix) if it cannot run here."""

    @classmethod
    def num_processes(cls, cfg) -> int:
        """Processes to launch: the workers, plus any servers."""
        return cfg.peers

    @classmethod
    def tolerates_peer_loss(cls, cfg) -> bool:
        """True if the run goes on when a peer dies (the loss is recorded)."""
        return False

    @classmethod
    def launcher(cls, cfg) -> str:
        """Key into launchers.LAUNCHERS."""
        return "local"

    @classmethod
    def after_run(cls, cfg, run_dir: Path) -> None:
        """In the launching process, once every process of the run has ended: remove leftovers."""

    # --- inside each process ---------------------------------------------
    def __init__(self, cfg, ctx: PeerContext):
        self.cfg, self.ctx = cfg, ctx
        self.model: nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None

    def is_worker(self) -> bool:
        """False for processes that only serve (e.g. parameter servers)."""
        return True

    def serve(self) -> None:
        """Main loop of a non-worker process."""
        raise NotImplementedError

    def setup(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Connect to the other peers and agree on the initial state."""
        self.model, self.optimizer = model, optimizer

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    @abstractmethod
    def step(self, samples: int) -> StepReport:
        """Gradients of `samples` samples are in .grad: communicate and update."""

    def should_stop(self, step: int) -> bool:
        """Stop before max_steps (e.g. on a shared epoch boundary)."""
        return False

    def step_limit(self) -> int:
        """Most steps the loop runs on this peer (strategies that stop on their own may allow more)."""
        return self.cfg.max_steps

    def summary(self) -> dict:
        """Strategy-specific figures for summary.json."""
        return {}

    def close(self) -> None:
        """Release connections and background processes."""

    # --- helpers for subclasses -------------------------------------------
    def timed_optimizer_step(self) -> float:
        start = time.perf_counter()
        self.optimizer.step()
        return time.perf_counter() - start
