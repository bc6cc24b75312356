"""Every private torch API the strategies rely on; tests/unit/test_private_apis.py fails when an upgrade moves one."""
import importlib
from datetime import timedelta

import torch.distributed as dist
from torch.distributed.distributed_c10d import _set_pg_timeout

DDP_HOOK_MODULES = ("default_hooks", "powerSGD_hook")  # torch's DDP hook modules; each calls dist.all_reduce


def source_rank(work: dist.Work) -> int:
    """The sender of a completed receive from any rank (torch.distributed irecv with src=None)."""
    return work._source_rank()


def set_collective_timeout(timeout: timedelta) -> None:
    """Every later operation of the default process group times out after `timeout` (its rendezvous had its own)."""
    _set_pg_timeout(timeout)


def route_ddp_hook_collectives(stand_in: object) -> None:
    """Make torch's DDP hook modules, which look up `dist.all_reduce` at call time, call `stand_in`'s instead."""
    for name in DDP_HOOK_MODULES:
        setattr(importlib.import_module(f"torch.distributed.algorithms.ddp_comm_hooks.{name}"), "dist", stand_in)
