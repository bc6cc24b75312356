"""The training loop, the same for every strategy: a step's time breakdown and the pauses (snapshots, the speed
reference) that leave training's clock. Definitions: docs/runs.md (Figures: one definition each)."""
import os
import time
from typing import Any, Iterable, Protocol

import torch
from omegaconf import DictConfig
from torch import nn

from job.data import GlobalOrder, Splits, batches
from job.device import PeerDevice
from job.evaluation import Snapshots
from job.fault import inject
from job.speed_reference import SpeedReference
from metrics.recording.machine import THREAD_SCHEDSTAT, ProcessClock, run_delay_ns
from metrics.recording.sampler import WireCounter
from metrics.recording.steplog import StepLog


# strategies.base's StepReport and Strategy as the loop uses them (job imports no strategy)
class StepOutcome(Protocol):
    opt_s: float
    bytes_sent: int
    bytes_recv: int
    round: int | None
    last: bool
    done: float | None
    link_s: float | None
    startup_wait_s: float
    extra: dict[str, Any]


class TrainedStrategy(Protocol):
    @classmethod
    def stops_at_target(cls, cfg: DictConfig) -> bool: ...
    def step_limit(self) -> int: ...
    def zero_grad(self) -> None: ...
    def step(self, samples: int) -> StepOutcome: ...
    def resume_together(self, claims: list[bool]) -> list[bool]: ...
    def trained(self) -> None: ...


class GradientClock:
    """When backward's last gradient came, and the training thread's CPU waits. Create it on the training thread."""

    def __init__(self, params: Iterable[nn.Parameter], device: PeerDevice):
        self.last_ready = 0.0
        self.events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) \
            if device.is_cuda else None  # (start of compute, last gradient) on the compute stream
        self.schedstat = os.open(THREAD_SCHEDSTAT, os.O_RDONLY) \
            if not self.events and os.path.exists(THREAD_SCHEDSTAT) else None
        self.at_start = self.at_ready = (0, 0.0, 0.0)  # (wait ns, process CPU s, this thread's CPU s)
        self.cores = 1  # the cores the training thread may run on: read at each start()
        self.handles = [p.register_post_accumulate_grad_hook(self._ready) for p in params if p.requires_grad]

    def clocks(self) -> tuple[int, float, float]:
        if self.schedstat is None:
            return 0, 0.0, 0.0
        return run_delay_ns(fd=self.schedstat), time.process_time(), time.thread_time()

    def start(self) -> None:
        self.last_ready = 0.0
        self.cores = len(os.sched_getaffinity(0))
        self.at_start = self.at_ready = self.clocks()
        if self.events:
            self.events[0].record()

    def _ready(self, param: torch.Tensor) -> None:
        self.last_ready = time.perf_counter()
        self.at_ready = self.clocks()
        if self.events:
            self.events[1].record()

    def wait_s(self) -> float:
        """The training thread's CPU wait, start() to last gradient, at most our other threads' CPU time then."""
        (wait0, process0, thread0), (wait1, process1, thread1) = self.at_start, self.at_ready
        others_cpu = (process1 - process0) - (thread1 - thread0)
        return max(0.0, min((wait1 - wait0) / 1e9, others_cpu))

    def waits(self, at_batch: tuple[int, float, float]) -> tuple[float, float, float]:
        """(waiting, lost, lost after the last gradient): the training thread's waits for a CPU from `at_batch`
        (clocks() before the batch) to now that our other threads do not explain, i.e. in each phase (data, to the last
        gradient, after it) beyond the time their CPU could have held all its cores: what other processes or a quota
        took. lost: all of them; waiting: those left out of compute and the update (step_phases' cpu_wait_s): after
        the last gradient, and wait_s()'s."""
        marks, beyond = (at_batch, self.at_start, self.at_ready, self.clocks()), []
        for (wait0, process0, thread0), (wait1, process1, thread1) in zip(marks, marks[1:]):
            held = max(0.0, (process1 - process0) - (thread1 - thread0)) / self.cores
            beyond.append(max(0.0, (wait1 - wait0) / 1e9 - held))
        explained_in_compute = (marks[2][0] - marks[1][0]) / 1e9 - beyond[1]
        return max(0.0, self.wait_s() - explained_in_compute) + beyond[2], sum(beyond), beyond[2]

    def compute_s(self, started: float) -> float:
        """Forward and backward up to the last gradient, less wait_s(); call after the step is synchronised."""
        if self.events and self.last_ready:
            return self.events[0].elapsed_time(self.events[1]) / 1000
        return max(0.0, max(self.last_ready, started) - started - self.wait_s())

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()
        if self.schedstat is not None:
            os.close(self.schedstat)


def communicated(report: StepOutcome) -> bool:
    """A step communicated where it sent or received payload, timed a link or ran an averaging round (one that found no
    group matchmade); one that did none of these has no comm_s."""
    return bool(report.bytes_sent or report.bytes_recv or report.link_s) or report.round is not None


def step_phases(span_s: float, compute_s: float, opt_s: float, cpu_wait_s: float,
                communicates: bool) -> dict[str, float]:
    """The phases of a step's span after its data, summing to it (docs/runs.md, Figures): comm_s, measured
    communication, is the span less compute, the update and cpu_wait_s (the training thread's waits for a CPU left out
    of them that the peer's own other threads do not explain), in a step that communicated, else 0; wait_s, waiting,
    is the rest."""
    comm_s = max(0.0, span_s - compute_s - opt_s - cpu_wait_s) if communicates else 0.0
    return {"compute_s": compute_s, "opt_s": opt_s, "comm_s": comm_s,
            "wait_s": max(0.0, span_s - compute_s - opt_s - comm_s)}


def next_snapshot(step: int, every: int, confirm_after: int, confirming: bool) -> int | None:
    """The step of the snapshot after the one at `step`: `confirm_after` steps on where every worker is at the target
    but not all confirmed it yet (eval_in_training), else the next multiple of `every` (None: none before the end)."""
    if confirming and confirm_after:
        return step + confirm_after
    return (step // every + 1) * every if every else None


def train(cfg: DictConfig, strategy: TrainedStrategy, model: nn.Module, trained: nn.Module, splits: Splits,
          order: GlobalOrder, log: StepLog, device: PeerDevice, snapshots: Snapshots) -> dict[str, Any]:
    """Train to the strategy's step limit, its last step, or the target reached in training, logging every step and
    taking the snapshots; `trained` is what the strategy trains (model, or a wrapper of it)."""
    stream = batches(splits.train, order, cfg.data.num_workers)  # order: this worker's batches of splits.train
    dtype = next(model.parameters()).dtype  # the batches in the model's precision (dtype)
    criterion = nn.CrossEntropyLoss()
    clock = GradientClock(model.parameters(), device)
    reference = SpeedReference.for_run(cfg, model, splits.train, device)
    start = time.perf_counter()
    paused_s = 0.0  # snapshots for evaluation and the speed reference: not training time
    evaluation_paused_s = 0.0  # of which the snapshots' (the speed reference's measurements aside)
    samples = 0
    all_reached = False  # eval_in_training: every worker's curve confirmed the crossing
    due: int | None = None  # the step of the next snapshot

    last_step = strategy.step_limit()

    def snapshot(step: int) -> None:
        nonlocal paused_s, evaluation_paused_s, all_reached, due
        paused_at = time.perf_counter()
        wall = paused_at - start
        snapshots.take(model, hold=step == 0 and last_step > 0, step=step, wall_s=wall, train_s=wall - paused_s,
                       samples=samples)
        measured_s = 0.0
        if reference and step:  # the machine's speed, in the same pause; from training's first steps (docs/runs.md)
            measured_s = reference.measure(step, time.perf_counter() - start, force=not reference.measurements)
        reached = snapshots.target_reached
        all_reached, all_at_target, start_unneeded = strategy.resume_together(
            [reached, reached or snapshots.at_target, not snapshots.start_needed])
        snapshots.settle_start(needed=not start_unneeded)  # once a snapshot after the held start is evaluated
        due = next_snapshot(step, int(cfg.eval_every), int(cfg.eval_confirm_after), all_at_target and not all_reached)
        pause_s = time.perf_counter() - paused_at
        paused_s += pause_s
        evaluation_paused_s += pause_s - measured_s

    trained.train()
    snapshot(0)
    wire = WireCounter() if cfg.network.name == "emulated" else None  # this peer's own interface
    process_clock = ProcessClock()
    step = 0
    try:
        for step in range(1, last_step + 1):
            inject(cfg.fault, order.rank, step, log.peer_dir)
            process_clock.start()
            t0, at_batch = time.perf_counter(), clock.clocks()
            x, y = next(stream)
            x, y = x.to(device.device, dtype, non_blocking=True), y.to(device.device, non_blocking=True)
            device.synchronize()
            t1 = time.perf_counter()
            clock.start()
            strategy.zero_grad()
            loss = criterion(trained(x), y)
            loss.backward()
            report = strategy.step(len(y))
            device.synchronize()
            t_end, ended_at, (cpu_wait_s, lost_s, lost_after_s) = time.perf_counter(), time.time(), \
                clock.waits(at_batch)
            used = process_clock.since_start()
            samples += len(y)
            wall = t_end - start
            paused_s += report.startup_wait_s  # waiting for peers to start is not training
            phases = step_phases(t_end - t1 - report.startup_wait_s, clock.compute_s(t1), report.opt_s, cpu_wait_s,
                                 communicated(report))
            log.step(step=step, wall_s=wall, train_s=wall - paused_s, samples=samples, loss=loss.item(),
                     data_s=t1 - t0, **phases, compute_wait_s=clock.wait_s(),
                     lost_to_sharing_s=lost_s, lost_after_gradient_s=lost_after_s,
                     hidden_comm_s=0.0 if report.link_s is None else max(0.0, report.link_s - phases["comm_s"]),
                     ended_at=ended_at,
                     bytes_sent=report.bytes_sent, bytes_recv=report.bytes_recv, round=report.round, **used,
                     **({} if report.done is None else {"done": report.done}),
                     **({"startup_wait_s": report.startup_wait_s} if report.startup_wait_s else {}),
                     **({} if report.link_s is None else {"link_s": report.link_s}),
                     **report.extra, **(wire.since_start() if wire else {}))
            if report.last or step == last_step or step == due:
                snapshot(step)
            if report.last or all_reached:
                break
    finally:
        clock.close()
    drained = {"wire_after_training": wire.drained()} if wire else {}
    if reference:
        reference.measure(step, time.perf_counter() - start, force=True)  # after the last step
    strategy.trained()
    return {"steps": step, "samples": samples, "stopped_at_target": all_reached,
            "evaluation_paused_s": evaluation_paused_s} | drained | (
        {"speed_reference": reference.record()} if reference else {})
