"""localsgd: post-local SGD (Lin et al. 2020), on torch's own utilities: localsgd.warmup_steps synchronous DDP steps
(post_localSGD_hook), then local steps, with torch's PeriodicModelAverager averaging the parameters every
localsgd.every of them and on the run's last step. transport=mpi is refused (docs/strategies.md, localsgd).
"""
import time
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from omegaconf import DictConfig
from torch import nn

from job.errors import ConfigError
from job.rules import above, integer_from
from strategies.allreduce import AllReduce
from strategies.base import LaunchSpec, StepReport
from strategies.transport import payload_bytes, ring_allreduce_bytes

if TYPE_CHECKING:
    from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import PostLocalSGDState


class LocalSGD(AllReduce):
    identical_snapshots = False  # workers step alone between averages
    stops_together = True
    summed_counters = ("averaging_rounds",)
    # the default 10 warm-up steps outlast a benchmark's 6-10 steps: periodic averages from step 4 instead
    benchmark_overrides = {"*": ("localsgd.warmup_steps=2", "localsgd.every=2")}
    uses_ddp = True  # DDP runs the warm-up's gradient all-reduce (and nothing after it)
    rules = {"every": integer_from(1), "warmup_steps": integer_from(0), "bucket_cap_mb": above(0)}

    @classmethod
    def validate(cls, cfg: DictConfig) -> None:
        super().validate(cfg)
        if cfg.transport != "gloo":
            raise ConfigError("localsgd runs on torch.distributed (DDP's post-local-SGD hook and torch's model "
                              "averager): transport=mpi is not supported, use transport=gloo")

    @classmethod
    def launch_spec(cls, cfg: DictConfig) -> LaunchSpec:
        spec = super().launch_spec(cfg)
        spec.effective_batch = cfg.batch_size  # after warm-up every update is on one worker's batch
        return spec

    @classmethod
    def averaging_period(cls, cfg: DictConfig) -> tuple[int, int]:
        return int(cfg.localsgd.warmup_steps), int(cfg.localsgd.every)  # averages at warmup + k * every (setup)

    def setup(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> nn.Module:
        from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager

        knobs = self.cfg.localsgd
        self.warmup, self.every = int(knobs.warmup_steps), int(knobs.every)
        trained = super().setup(model, optimizer)
        self.averager = PeriodicModelAverager(period=self.every, warmup_steps=self.warmup + self.every - 1)
        return trained

    def hook_state(self) -> "PostLocalSGDState":
        from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import PostLocalSGDState

        return PostLocalSGDState(process_group=None, subgroup=None, start_localSGD_iter=self.warmup,
                                 post_local_gradient_allreduce=False)

    def bucket_hook(self, state: "PostLocalSGDState",
                    bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import post_localSGD_hook

        return post_localSGD_hook(state, bucket)

    def bucket_communicates(self, state: "PostLocalSGDState") -> bool:
        return state.iter < state.start_localSGD_iter  # the hook's own test: global all-reduce until then

    steps = averaging_rounds = 0
    averaging_s = 0.0

    def step(self, samples: int) -> StepReport:
        self.steps += 1
        report = self._ddp_step() if self.steps <= self.warmup else StepReport(opt_s=self.timed_optimizer_step())
        params = self.trainable()
        a = self.averager  # PeriodicModelAverager's own test: will its next average_parameters call average?
        due = a.step >= a.warmup_steps and (a.step - a.warmup_steps) % a.period == 0
        last = self.steps == self.step_limit() and self.steps > self.warmup and not due
        start = time.perf_counter()
        self.averager.average_parameters(params)  # averages when due; counts the step either way
        if last:  # the run ends with one model
            from torch.distributed.algorithms.model_averaging.utils import average_parameters

            # torch annotates the group ProcessGroup but takes None for the default one
            average_parameters(iter(params), None)  # type: ignore[arg-type]
        if due or last:
            self.averaging_s += time.perf_counter() - start
            self.averaging_rounds += 1
            report.bytes_sent = report.bytes_recv = ring_allreduce_bytes(sum(payload_bytes(p) for p in params),
                                                                         self.ctx.world_size)
            report.extra = {"averaged": True}
        return report

    def summary(self) -> dict[str, Any]:
        return {"warmup_steps": self.warmup, "every": self.every, "averaging_rounds": self.averaging_rounds,
                "mean_averaging_s": self.averaging_s / self.averaging_rounds if self.averaging_rounds else None}
