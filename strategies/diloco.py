"""diloco: DiLoCo (Douillard et al. 2023): every diloco.inner_steps steps (and on the run's last) the workers
all-reduce delta = theta_sync - theta and an outer Nesterov SGD steps theta_sync with it (docs/strategies.md)."""
import time
from typing import Any

import torch
from omegaconf import DictConfig
from torch import nn

from job.rules import above, integer_from, within
from strategies.base import LaunchSpec, StepReport
from strategies.transport import (TransportStrategy, broadcast_initial_state, flatten,
                                  payload_bytes, ring_allreduce_bytes, unflatten_into)


class DiLoCo(TransportStrategy):
    summed_counters = ("outer_steps",)
    stops_together = True  # workers differ between outer steps
    benchmark_overrides = {"*": ("diloco.inner_steps=2",)}  # a 10-step benchmark: 4 syncs after the first
    knobs_elsewhere = {"inner_optim": "the inner optimizer is the optim group, e.g. optim=adamw (the preset's) or "
                                      "optim=sgd, so that the one-process baseline trains with it too"}
    rules = {"inner_steps": integer_from(1), "outer_lr": above(0), "outer_momentum": within(0, 1)}

    @classmethod
    def launch_spec(cls, cfg: DictConfig) -> LaunchSpec:
        spec = super().launch_spec(cfg)
        spec.effective_batch = cfg.batch_size  # every inner update is on one worker's batch
        return spec

    @classmethod
    def averaging_period(cls, cfg: DictConfig) -> tuple[int, int]:
        return 0, int(cfg.diloco.inner_steps)

    def setup(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> nn.Module:
        super().setup(model, optimizer)
        self.connect()
        broadcast_initial_state(self.connected(), model)
        knobs = self.cfg.diloco
        self.inner_steps = int(knobs.inner_steps)
        self.synced = flatten([p.data for p in self.trainable()])  # theta_sync, on the host
        momentum = float(knobs.outer_momentum)
        self.outer = torch.optim.SGD([self.synced], lr=float(knobs.outer_lr), momentum=momentum,
                                     nesterov=momentum > 0)
        return model

    steps = outer_steps = 0
    sync_s = 0.0

    def step(self, samples: int) -> StepReport:
        self.steps += 1
        report = StepReport(opt_s=self.timed_optimizer_step())
        if self.steps % self.inner_steps == 0 or self.steps == self.step_limit():
            self._sync(report)
        return report

    def _sync(self, report: StepReport) -> None:
        """Average the pseudo-gradient over all workers and take the outer step; every worker then holds it."""
        start = time.perf_counter()
        params = [p.data for p in self.trainable()]
        delta = self.synced - flatten(params)
        self.connected().allreduce_sum(delta)
        delta /= self.ctx.world_size
        communicated = self.update_clock()
        self.synced.grad = delta
        self.outer.step()
        unflatten_into(self.synced, params)
        self.device.synchronize()
        report.opt_s += self.update_clock(end=True) - communicated  # the outer update is an optimizer update
        sent = ring_allreduce_bytes(payload_bytes(delta), self.ctx.world_size)
        report.bytes_sent = report.bytes_recv = sent
        report.round = self.outer_steps
        report.extra = {"outer_step": self.outer_steps}
        self.outer_steps += 1
        self.sync_s += time.perf_counter() - start

    def summary(self) -> dict[str, Any]:
        return {"outer_steps": self.outer_steps, "inner_steps": self.inner_steps,
                "mean_sync_s": self.sync_s / self.outer_steps if self.outer_steps else None}
