"""Optimizers by config name; `lr` (one peer's batch) scaled by lr_scaling to k = the strategy's effective batch
(LaunchSpec.effective_batch) / batch_size: none, linear (x k) or sqrt; warmup_steps ramp it from lr."""
import math
from typing import Any, Callable

import torch
from omegaconf import DictConfig
from torch.optim.optimizer import ParamsT

SCALINGS = ("none", "linear", "sqrt")


def sgd(params: ParamsT, cfg: DictConfig, lr: float) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=lr, momentum=cfg.optim.momentum, weight_decay=cfg.optim.weight_decay)


def adam_family(kind: type[torch.optim.Adam]) -> Callable[[ParamsT, DictConfig, float], torch.optim.Optimizer]:
    return lambda params, cfg, lr: kind(params, lr=lr, betas=tuple(cfg.optim.betas),
                                        weight_decay=cfg.optim.weight_decay)


OPTIMIZERS = {"sgd": sgd, "adam": adam_family(torch.optim.Adam), "adamw": adam_family(torch.optim.AdamW)}


def scaled_lr(cfg: DictConfig, effective_batch: int) -> float:
    k = effective_batch / cfg.batch_size
    return float(cfg.lr) * {"none": 1.0, "linear": k, "sqrt": math.sqrt(k)}[cfg.lr_scaling]


def lr_at(cfg: DictConfig, effective_batch: int, updates_done: int) -> float:
    """The rate of the next update after `updates_done` updates (linear warm-up, then constant)."""
    target = scaled_lr(cfg, effective_batch)
    warmup = int(cfg.warmup_steps)
    if updates_done >= warmup:
        return target
    return float(cfg.lr) + (target - float(cfg.lr)) * updates_done / warmup


def build_optimizer(params: ParamsT, cfg: DictConfig, effective_batch: int) -> torch.optim.Optimizer:
    optimizer = OPTIMIZERS[cfg.optim.name](params, cfg, lr_at(cfg, effective_batch, 0))
    if int(cfg.warmup_steps) > 0:
        updates = 0

        def next_rate(opt: torch.optim.Optimizer, _args: tuple[Any, ...], _kwargs: dict[str, Any]) -> None:
            nonlocal updates
            updates += 1
            for group in opt.param_groups:
                group["lr"] = lr_at(cfg, effective_batch, updates)

        optimizer.register_step_post_hook(next_rate)
    return optimizer
