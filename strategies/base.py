"""The one Strategy interface every averaging backend implements: class methods decided before launch (knobs,
validation, availability, `launch_spec`), and inside each process `setup`, `step`, `summary`. The loop (job/loop.py)
owns the time breakdown; a strategy reports its optimizer time and the bytes it moved. Adding one: docs/architecture.md.
"""
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import torch
from omegaconf import DictConfig
from torch import nn

from job.contract import PeerContext
from job.device import PeerDevice
from job.rules import Rule
from metrics.recording.machine import thread_wait_s
from metrics.recording.rundir import SERVER, WORKER, LaunchSpec, RunDir

__all__ = ["SERVER", "WORKER", "LaunchSpec", "PeerContext", "StepReport", "Strategy"]

@dataclass
class StepReport:
    """What one `step()` did on this peer."""

    opt_s: float = 0.0  # the update, timed on update_clock (the loop counts the rest after backward as communication)
    bytes_sent: int = 0  # payload bytes put on / taken off the transport, from exact accounting of the tensors
    bytes_recv: int = 0
    round: int | None = None  # the averaging round these bytes belong to (grouped across workers); None: the step
    last: bool = False  # the peer's last step (e.g. a shared epoch boundary was reached)
    done: float | None = None  # share of the run done, for strategies that stop on their own (None: step / max_steps)
    # the strategy's own timing of its transfers (overlap with backward: first gradient handed over to last transfer
    # done; hivemind: its all-reduce phase); link efficiency uses it instead of comm_s; None: not timed
    link_s: float | None = None
    startup_wait_s: float = 0.0  # waiting for the other peers to start: left out of train_s and the step's phases
    extra: dict[str, Any] = field(default_factory=dict)  # strategy-specific per-step fields


class Strategy(ABC):
    is_baseline = False  # a single-process run without communication, that others are compared with
    summed_counters: tuple[str, ...] = ()   # integer keys of summary() that train.py sums over peers and prints
    failure_counters: tuple[str, ...] = ()  # keys of summary() that count failures (report: Failures, verdict)
    quick: tuple[str, ...] = ()             # overrides that keep a short run of it short (tests)
    benchmark_overrides: dict[str, tuple[str, ...]] = {}  # bench NAME ("*": every one) -> overrides to reach rounds
    synchronous = True  # workers step in lockstep, every round holding every worker (bench/projection.py's goal)
    # every worker holds the same parameters at every snapshot, so each may stop at its target (eval_in_training)
    identical_snapshots = False
    # the workers' states may differ at a snapshot, but resume_together tells each whether all of them reached the
    # target, so they stop together at the first pause where every worker's own curve confirmed it (eval_in_training)
    stops_together = False
    knobs_elsewhere: dict[str, str] = {}  # NAME.knob someone may expect -> where it is set (refused before Hydra)
    rules: dict[str, Rule] = {}  # knob of its NAME block -> its allowed values (the schema checks them before launch)

    # --- decided before any process starts -------------------------------
    @classmethod
    def knobs(cls, cfg: DictConfig) -> dict[str, Any]:
        """This strategy's settings: its own `NAME:` block (see conf/strategy/NAME.yaml)."""
        from omegaconf import OmegaConf

        block = cfg.get(cfg.strategy.name)
        if block is None:
            return {}
        knobs = OmegaConf.to_container(block, resolve=True)
        assert isinstance(knobs, dict)  # a NAME: block is a mapping of knob names
        return {str(name): value for name, value in knobs.items()}

    @classmethod
    def lockstep(cls, cfg: DictConfig) -> bool:
        """Whether this run's workers step in lockstep (one's delay delays all): `synchronous`, per run."""
        return cls.synchronous

    @classmethod
    def stops_at_target(cls, cfg: DictConfig) -> bool:
        """Whether eval_in_training may end its runs at the target: its workers hold one state at every snapshot, or
        stop together."""
        return cls.identical_snapshots or cls.stops_together

    @classmethod
    def validate(cls, cfg: DictConfig) -> None:
        """Raise job.errors.ConfigError for knobs that do not fit together or the run (`rules`: each alone)."""

    @classmethod
    def check_available(cls, cfg: DictConfig) -> None:
        """Raise job.errors.BackendUnavailable (why + how to fix) if it cannot run here."""

    @classmethod
    def launch_spec(cls, cfg: DictConfig) -> LaunchSpec:
        """Default: `peers` workers, one process each, started by the local launcher, each update on every batch."""
        return LaunchSpec(roles=[WORKER] * cfg.peers, threads=cfg.peer_cpus, batch_size=cfg.batch_size,
                          effective_batch=cfg.peers * cfg.batch_size)

    @classmethod
    def averaging_period(cls, cfg: DictConfig) -> tuple[int, int]:
        """(offset, every): its averaging steps are offset + k * every, k >= 1 (metrics/summary/window.py)."""
        return 0, 1

    @classmethod
    def after_run(cls, cfg: DictConfig, run: RunDir) -> None:
        """In the launching process, once every process of the run has ended: remove leftovers."""

    # --- inside each process ---------------------------------------------
    def __init__(self, cfg: DictConfig, ctx: PeerContext, spec: LaunchSpec, device: PeerDevice | None = None):
        self.cfg, self.ctx, self.spec = cfg, ctx, spec
        self.device = device or PeerDevice(torch.device("cpu"))  # where the model and its gradients live
        self.model: nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None

    @property
    def role(self) -> str:
        return self.spec.roles[self.ctx.rank]

    def serve(self) -> None:
        """Main loop of a SERVER process."""
        raise NotImplementedError

    def setup(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> nn.Module:
        """Connect to the other peers and agree on the initial state; returns the model to train (or a wrapper)."""
        self.model, self.optimizer = model, optimizer
        return model

    def zero_grad(self) -> None:
        assert self.optimizer is not None, "setup() first"
        self.optimizer.zero_grad(set_to_none=True)

    @abstractmethod
    def step(self, samples: int) -> StepReport:
        """Gradients of `samples` samples are in .grad: communicate and update."""

    def step_limit(self) -> int:
        """Most steps the loop runs on this peer (strategies that stop on their own may allow more)."""
        return self.cfg.max_steps

    def resume_together(self, claims: list[bool]) -> list[bool]:
        """On a worker, at the end of each pause (snapshot, evaluation, speed reference): return once every worker has
        ended its pause, so that no worker counts another's pause as its communication; returns, for each of this
        worker's `claims` (job/loop.py: its curve confirmed the target, it is at the target), whether every worker
        makes it. The default neither waits nor asks."""
        return claims

    def trained(self) -> None:
        """On a worker, after its last step and the speed reference's last measurement, before evaluation."""

    def summary(self) -> dict[str, Any]:
        """Strategy-specific figures for summary.json."""
        return {}

    def close(self) -> None:
        """Release connections and background processes (also after a failed setup)."""

    # --- helpers for subclasses -------------------------------------------
    def update_clock(self, end: bool = False) -> float:
        """Seconds for timing an update (opt_s): perf_counter less this thread's waits for a CPU so far, which the loop
        counts as waiting (job/loop.py; not on a GPU). The two are read in the order (the clock first at the start,
        last at the end) that leaves a wait between the reads inside the update, never making it negative."""
        if self.device.is_cuda:
            return time.perf_counter()
        if end:
            waited = thread_wait_s()
            return time.perf_counter() - waited
        now = time.perf_counter()
        return now - thread_wait_s()

    def timed_optimizer_step(self) -> float:
        self.device.synchronize()  # on a GPU, what was queued before is not the update's time
        assert self.optimizer is not None, "setup() first"
        start = self.update_clock()
        self.optimizer.step()
        self.device.synchronize()
        return self.update_clock(end=True) - start

    def trainable(self) -> list[nn.Parameter]:
        assert self.model is not None, "setup() first"
        return [p for p in self.model.parameters() if p.requires_grad]

    def fill_missing_grads(self) -> list[torch.Tensor]:
        """Parameters that got no gradient this step count as zero (every peer sends the same layout); returns the
        trainable parameters' gradients."""
        grads = []
        for p in self.trainable():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
        return grads
