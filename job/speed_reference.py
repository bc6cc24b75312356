"""The machine's speed during a run: forward and backward of a copy of the worker's initial model on a fixed batch,
timed with training's clock stopped and its model and RNG untouched (docs/runs.md: speed_reference)."""
import copy
import resource
import statistics
import time
from typing import Any, TypedDict

import torch
from omegaconf import DictConfig
from torch import nn

from job.data import Samples
from job.device import PeerDevice

MIN_TIMING_S = 0.02  # a timing spans at least this long, so the timer's and the scheduler's jitter stay small in it


class Measurement(TypedDict):
    """One pause: its step and training's wall clock there, when it began (epoch s), the median timing and every
    timing (seconds of one pass), the process's minor page faults per timed pass, and the pause it cost."""
    step: int
    wall_s: float
    at: float
    seconds: float
    times: list[float]
    minor_faults: float
    pause_s: float


class SpeedReference:
    """Times the fixed work; measure() at the pauses, record() for result.json."""

    def __init__(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, repetitions: int, max_share: float,
                 device: PeerDevice):
        self.model, self.x, self.y = model, x, y
        self.repetitions, self.max_share, self.device = repetitions, max_share, device
        self.measurements: list[Measurement] = []
        self.cost_s = 0.0
        self.passes = 0  # forward and backward passes per timing: set at the first measurement

    @classmethod
    def for_run(cls, cfg: DictConfig, model: nn.Module, train_split: Samples,
                device: PeerDevice) -> "SpeedReference | None":
        """The reference of `cfg.speed_reference` for this worker's model (None: repetitions=0, off)."""
        settings = cfg.speed_reference
        if not int(settings.repetitions):
            return None
        reference = copy.deepcopy(model)  # tensors' own hooks are not copied
        for module in reference.modules():  # module hooks are: drop them (a strategy's must not fire)
            for hooks in (module._forward_hooks, module._forward_pre_hooks, module._backward_hooks,
                          module._backward_pre_hooks):
                hooks.clear()
        for p in reference.parameters():
            p.grad = None
        samples = [train_split[i] for i in range(min(int(settings.samples), len(train_split)))]
        dtype = next(model.parameters()).dtype
        x = torch.stack([s[0] for s in samples]).to(device.device, dtype)
        y = torch.as_tensor([int(s[1]) for s in samples]).to(device.device)
        return cls(reference, x, y, int(settings.repetitions), float(settings.max_share), device)

    def _pass(self) -> None:
        nn.functional.cross_entropy(self.model(self.x), self.y).backward()
        for p in self.model.parameters():
            p.grad = None

    def _timing_s(self) -> float:
        """Seconds of one pass, timed over `passes` passes in a row."""
        self.device.synchronize()
        started = time.perf_counter()
        for _ in range(self.passes):
            self._pass()
        self.device.synchronize()
        return (time.perf_counter() - started) / self.passes

    def _calibrate(self) -> None:
        """The passes that make one timing last MIN_TIMING_S."""
        self.passes = 1
        while self._timing_s() * self.passes < MIN_TIMING_S:
            self.passes *= 2

    def measure(self, step: int, train_wall_s: float, force: bool = False) -> float:
        """Time the work at `step` unless the budget says no; returns the pause it cost in seconds."""
        if self.measurements and self.measurements[-1]["step"] == step:
            return 0.0  # measured at this step already
        last = self.measurements[-1]["pause_s"] if self.measurements else 0.0
        if not force and self.cost_s + 2 * last > self.max_share * train_wall_s:  # room for this one and the final one
            return 0.0
        started, at = time.perf_counter(), time.time()
        with torch.random.fork_rng(devices=[self.device.device] if self.device.is_cuda else []):
            if not self.passes:
                self._calibrate()
            faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            times = [self._timing_s() for _ in range(self.repetitions)]
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before
        pause_s = time.perf_counter() - started
        self.cost_s += pause_s
        self.measurements.append({"step": step, "wall_s": train_wall_s, "at": at,
                                  "seconds": statistics.median(times), "times": times,
                                  "minor_faults": faults / (self.repetitions * self.passes), "pause_s": pause_s})
        return pause_s

    def record(self) -> dict[str, Any]:
        """What result.json keeps: every measurement, the work's description and the total cost."""
        return {"measurements": self.measurements, "cost_s": self.cost_s, "samples": len(self.y),
                "repetitions": self.repetitions, "passes": self.passes, "threads": torch.get_num_threads(),
                "dtype": str(self.x.dtype).removeprefix("torch."), "device": str(self.device.device)}
