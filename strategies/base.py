"""The one Strategy interface every averaging backend implements.

A strategy is one module (plus its config, conf/strategy/NAME.yaml, naming its class in
`strategy.target` and its cost model in `strategy.cost_model`). It has two halves, as Bagua's
Algorithm and what it reifies:

- before launch (class methods, called by train.py and the launchers): its knobs and
  their validation, whether its backend is installed, how its processes start
  (`launch_spec`: the launchers read no strategy knob);
- inside each process: `setup` (may wrap the model, e.g. in DDP, or register its own
  gradient hooks to communicate during backward), `step` (communicate and update),
  `summary`.

Its cost model is a class of its own beside it (strategies/cost_models/<name>.py, no runtime): the
bytes a round puts on each link, the round's link floor (`link_bound`, formula and
derivation in its docstring) and the step time the projection predicts.

What the launch side and the report read of a strategy is declared here, not guessed
from names: `summed_counters` and `failure_counters` (keys of its `summary()`), the overlap
figure (`StepReport.link_s`), `quick` (overrides for a short run) and `benchmark_overrides`
(what a benchmark's few steps need to reach its averaging rounds).

The training loop (job/loop.py) is the same for every strategy and owns the time
breakdown; a strategy reports only its optimizer time and the bytes it moved.
"""
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch
from torch import nn

from job.contract import SERVER, WORKER, LaunchSpec, PeerContext
from job.device import PeerDevice
from job.rules import Rule
from metrics.recording.rundir import RunDir

__all__ = ["SERVER", "WORKER", "LaunchSpec", "PeerContext", "StepReport", "Strategy"]

@dataclass
class StepReport:
    """What one `step()` did on this peer.

    opt_s: time in the local optimizer update (the loop counts the rest of the step,
      after backward, as exposed communication).
    bytes_sent / bytes_recv: payload bytes this peer put on / took off the transport,
      from exact accounting of the tensors it exchanged.
    round: id of the averaging round these bytes belong to (rounds are grouped by it
      across workers); None: the step number.
    last: this was the peer's last step (e.g. a shared epoch boundary was reached).
    done: share of the run done after this step, for strategies that stop on their own
      (None: step / max_steps); live progress and its ETA use it.
    link_s: for a strategy that overlaps communication with backward: the time from the first
      gradient handed to communication to the last transfer done (the exposed part is in the
      loop's comm_s); link efficiency uses it instead of comm_s. None: no overlap.
    startup_wait_s: time of this step spent waiting for the other peers to start (not training: the loop
      leaves it out of train_s and of the step's phases, and logs it as startup_wait_s).
    extra: strategy-specific per-step fields (e.g. its own raw collective time).
    """

    opt_s: float = 0.0
    bytes_sent: int = 0
    bytes_recv: int = 0
    round: int | None = None
    last: bool = False
    done: float | None = None
    link_s: float | None = None
    startup_wait_s: float = 0.0
    extra: dict = field(default_factory=dict)


class Strategy(ABC):
    is_baseline = False  # a single-process run without communication, that others are compared with
    summed_counters: tuple[str, ...] = ()   # integer keys of summary() that train.py sums over peers and prints
    failure_counters: tuple[str, ...] = ()  # keys of summary() that count failures (report: Failures, verdict)
    quick: tuple[str, ...] = ()             # overrides that keep a short run of it short (tests)
    # benchmark (bench/NAME.py; "*": every one) -> the overrides with which its few steps reach this averaging
    benchmark_overrides: dict[str, tuple[str, ...]] = {}
    # its workers step in lockstep, every round holding every worker (default settings): bench/projection.py's
    # tighter goal applies to its cost model
    synchronous = True
    # every worker holds the same parameters at every snapshot (default settings), so each can decide alone, on its
    # own evaluation, that the run reached its target (eval_in_training); false: evaluated after training instead
    identical_snapshots = False
    knobs_elsewhere: dict[str, str] = {}  # NAME.knob someone may expect -> where it is set (refused before Hydra)
    rules: dict[str, Rule] = {}  # knob of its NAME block -> its allowed values (the schema checks them before launch)

    # --- decided before any process starts -------------------------------
    @classmethod
    def knobs(cls, cfg) -> dict:
        """This strategy's settings: its own `NAME:` block (see conf/strategy/NAME.yaml)."""
        from omegaconf import OmegaConf

        block = cfg.get(cfg.strategy.name)
        return OmegaConf.to_container(block, resolve=True) if block is not None else {}

    @classmethod
    def validate(cls, cfg) -> None:
        """Raise job.errors.ConfigError for knobs that do not fit together or the run (`rules`: each alone)."""

    @classmethod
    def check_available(cls, cfg) -> None:
        """Raise job.errors.BackendUnavailable (why + how to fix) if it cannot run here."""

    @classmethod
    def launch_spec(cls, cfg) -> LaunchSpec:
        """Default: `peers` workers, one process each, started by the local launcher, averaging
        gradients synchronously (an update holds every worker's batch)."""
        return LaunchSpec(roles=[WORKER] * cfg.peers, threads=cfg.peer_cpus, batch_size=cfg.batch_size,
                          effective_batch=cfg.peers * cfg.batch_size)

    @classmethod
    def averaging_period(cls, cfg) -> tuple[int, int]:
        """(offset, every): its averaging steps are offset + k * every, k >= 1 (the measurement window covers whole
        periods: metrics/summary/window.py). Default: every step."""
        return 0, 1

    @classmethod
    def after_run(cls, cfg, run: RunDir) -> None:
        """In the launching process, once every process of the run has ended: remove leftovers."""

    # --- inside each process ---------------------------------------------
    def __init__(self, cfg, ctx: PeerContext, spec: LaunchSpec, device: PeerDevice | None = None):
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
        """Connect to the other peers and agree on the initial state; returns the model to train
        (the same one, or a wrapper such as DistributedDataParallel)."""
        self.model, self.optimizer = model, optimizer
        return model

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    @abstractmethod
    def step(self, samples: int) -> StepReport:
        """Gradients of `samples` samples are in .grad: communicate and update."""

    def step_limit(self) -> int:
        """Most steps the loop runs on this peer (strategies that stop on their own may allow more)."""
        return self.cfg.max_steps

    def trained(self) -> None:
        """On a worker, after its last step and the speed reference's last measurement, before evaluation."""

    def summary(self) -> dict:
        """Strategy-specific figures for summary.json."""
        return {}

    def close(self) -> None:
        """Release connections and background processes (also after a failed setup)."""

    # --- helpers for subclasses -------------------------------------------
    def timed_optimizer_step(self) -> float:
        self.device.synchronize()  # on a GPU, what was queued before is not the update's time
        start = time.perf_counter()
        self.optimizer.step()
        self.device.synchronize()
        return time.perf_counter() - start

    def trainable(self) -> list[torch.Tensor]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def fill_missing_grads(self) -> None:
        """Parameters that got no gradient this step count as zero (every peer sends the same layout)."""
        for p in self.trainable():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
