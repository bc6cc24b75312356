"""allreduce: the gradient all-reduce of data-parallel training, every step: torch's DistributedDataParallel with
allreduce.comm_hook over gloo, else (transport=mpi or allreduce.ddp=false) one flat all-reduce after backward.
Bytes: docs/strategies.md (allreduce)."""
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist
from omegaconf import DictConfig
from torch import nn

from job.errors import BackendUnavailable, ConfigError
from job.rules import Rule, above, integer, integer_from, one_of
from strategies.base import StepReport
from strategies.gradient_norms import GradientNorms
from strategies.torch_internals import route_ddp_hook_collectives
from strategies.transport import (TransportStrategy, broadcast_initial_state, flatten, in_process_gloo, payload_bytes,
                                  ring_allreduce_bytes, unflatten_into)

COMM_HOOKS = ("none", "fp16", "bf16", "powersgd")


class CountedCollectives:
    """torch.distributed as torch's DDP hook modules see it, counting the bytes of every tensor handed to all_reduce."""

    def __init__(self, dist: ModuleType) -> None:
        self._dist, self._lock, self.bytes = dist, threading.Lock(), 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dist, name)

    def all_reduce(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> dist.Work | None:
        with self._lock:
            self.bytes += payload_bytes(tensor)
        return self._dist.all_reduce(tensor, *args, **kwargs)

    def take(self) -> int:
        """Bytes counted since the last take()."""
        with self._lock:
            counted, self.bytes = self.bytes, 0
        return counted


def count_hook_collectives() -> CountedCollectives:
    counter = CountedCollectives(dist)
    route_ddp_hook_collectives(counter)
    return counter


def bf16_allreduce_problem() -> str | None:
    """Whether gloo all-reduces bfloat16 here (it has failed upstream): two in-process gloo ranks sum 1 + 2."""
    def rank(r: int, group: dist.ProcessGroupGloo) -> list[float]:
        tensor = torch.full((8,), float(r + 1), dtype=torch.bfloat16)
        group.allreduce([tensor]).wait()  # type: ignore[attr-defined]  # torch's Backend stub omits allreduce
        return tensor.float().tolist()

    results, errors = in_process_gloo(rank)  # any failure means: not usable
    if errors or results != {0: [3.0] * 8, 1: [3.0] * 8}:
        return errors[0] if errors else f"wrong or missing result {results}"
    return None


class AllReduce(TransportStrategy):
    rules = {"bucket_cap_mb": above(0), "comm_hook": one_of(*COMM_HOOKS), "powersgd_rank": integer_from(1),
             "powersgd_start_iter": Rule(lambda v: isinstance(v, int) and integer(v) and v >= 2,
                                         "must be >= 2 (torch's PowerSGD with error feedback)")}
    identical_snapshots = True  # every update applies the same averaged gradient

    @classmethod
    def validate(cls, cfg: DictConfig) -> None:
        super().validate(cfg)
        knobs = cls.knobs(cfg)
        if "comm_hook" not in knobs:  # a subclass with its own knobs (localsgd) runs DDP's hooks its own way
            return
        hook = knobs["comm_hook"]
        if hook != "none" and not (cfg.transport == "gloo" and knobs["ddp"]):
            raise ConfigError(f"allreduce.comm_hook={hook} is a DDP communication hook: it needs "
                              "transport=gloo and allreduce.ddp=true")

    @classmethod
    def check_available(cls, cfg: DictConfig) -> None:
        if cls.knobs(cfg).get("comm_hook") == "bf16" and (problem := bf16_allreduce_problem()):
            raise BackendUnavailable(f"allreduce.comm_hook=bf16: gloo's bfloat16 all-reduce fails in this torch "
                                     f"({problem}); use allreduce.comm_hook=fp16")

    @property
    def uses_ddp(self) -> bool:
        return self.cfg.transport == "gloo" and bool(self.cfg.allreduce.ddp)

    def setup(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> nn.Module:
        super().setup(model, optimizer)
        self.connect()
        self.first_bucket_at: float | None = None
        self.last_bucket_done_at: float | None = None
        plain_average = self.knobs(self.cfg).get("comm_hook", "none") == "none"  # no compression: norms measured
        self.norms = GradientNorms(self.cfg.noise_scale_every if plain_average else 0)
        if not self.uses_ddp:
            broadcast_initial_state(self.connected(), model)
            return model
        from torch.nn.parallel import DistributedDataParallel

        self.ddp = DistributedDataParallel(model, device_ids=[self.device.device] if self.device.is_cuda else None,
                                           bucket_cap_mb=float(self.knobs(self.cfg)["bucket_cap_mb"]),
                                           broadcast_buffers=False)
        self.counted = count_hook_collectives()
        self.ddp.register_comm_hook(state=self.hook_state(), hook=self._counted_allreduce)
        return self.ddp

    def hook_state(self) -> Any:  # a DDP hook's state: whatever that hook takes
        """The state DDP hands to bucket_hook: PowerSGD's for allreduce.comm_hook=powersgd, else none."""
        knobs = self.knobs(self.cfg)
        if knobs.get("comm_hook") != "powersgd":
            return None
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

        return powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=int(knobs["powersgd_rank"]),
                                           start_powerSGD_iter=int(knobs["powersgd_start_iter"]),
                                           random_seed=int(self.cfg.seed))

    def bucket_hook(self, state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        """What DDP does with a bucket of gradients: torch's DDP comm hook named by allreduce.comm_hook."""
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

        Hook = Callable[[Any, dist.GradBucket], torch.futures.Future[torch.Tensor]]
        hooks: dict[str, Hook] = {"none": default_hooks.allreduce_hook, "fp16": default_hooks.fp16_compress_hook,
                                  "bf16": default_hooks.bf16_compress_hook, "powersgd": powerSGD_hook.powerSGD_hook}
        return hooks[self.knobs(self.cfg).get("comm_hook", "none")](state, bucket)

    def bucket_communicates(self, state: Any) -> bool:
        """Whether bucket_hook sends this bucket (its timing is then recorded)."""
        return True

    def _counted_allreduce(self, state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        """bucket_hook on one bucket, timing the step's first bucket out and last back when it communicates."""
        if not self.bucket_communicates(state):
            return self.bucket_hook(state, bucket)
        if self.first_bucket_at is None:
            self.first_bucket_at = time.perf_counter()
        self.norms.add(bucket.buffer(), local=True, used=False)  # before the hook averages it in place

        def done(future: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
            self.last_bucket_done_at = time.perf_counter()
            try:
                averaged = future.value()
                self.norms.add(averaged, local=False, used=True)
                return averaged
            except RuntimeError as exc:
                if "timed out" in str(exc).lower():
                    raise TimeoutError(f"DDP all-reduce on rank {self.ctx.rank} timed out after "
                                       f"{float(self.cfg.timeouts.collective_s):.0f} s (timeouts.collective_s): "
                                       "a peer stalled or died") from exc
                raise

        return self.bucket_hook(state, bucket).then(done)

    def step(self, samples: int) -> StepReport:
        return self._ddp_step() if self.uses_ddp else self._flat_allreduce_step()

    def _ddp_step(self) -> StepReport:
        """The update after DDP all-reduced this step's gradients during backward."""
        first, last = self.first_bucket_at, self.last_bucket_done_at
        link_s = last - first if first is not None and last is not None else None  # None: no bucket sent
        self.first_bucket_at = None
        return self._report(self.counted.take(), link_s)

    def _report(self, collective_bytes: int, link_s: float | None = None) -> StepReport:
        sent = ring_allreduce_bytes(collective_bytes, self.ctx.world_size)
        return StepReport(opt_s=self.timed_optimizer_step(), bytes_sent=sent, bytes_recv=sent,
                          extra={"collective_bytes": collective_bytes, **self.norms.take()}, link_s=link_s)

    def _flat_allreduce_step(self) -> StepReport:
        grads = self.fill_missing_grads()
        flat = flatten(grads)
        self.norms.add(flat, local=True, used=False)
        self.connected().allreduce_sum(flat)
        flat /= self.ctx.world_size
        self.norms.add(flat, local=False, used=True)
        unflatten_into(flat, grads)
        return self._report(payload_bytes(flat))
