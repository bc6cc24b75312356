"""Point-to-point and collective calls over torch.distributed (gloo) or MPI (mpi4py).

Every blocking call has a deadline (timeouts.collective_s): a dead or stuck peer
raises TimeoutError naming the call, never a hang. Tensors are CPU, contiguous.
"""
import time
from abc import ABC, abstractmethod
from datetime import timedelta

import torch

from job.errors import BackendUnavailable, ConfigError

TRANSPORTS = ("gloo", "mpi")


def check_transport(cfg) -> None:
    transport = cfg.transport
    if transport not in TRANSPORTS:
        raise ConfigError(f"transport must be one of {', '.join(TRANSPORTS)}, got {transport}")
    if transport == "mpi":
        try:
            import mpi4py  # noqa: F401
        except ImportError as exc:
            raise BackendUnavailable(
                f"transport=mpi needs mpi4py with a real MPI ({exc}); run `make setup` "
                "(installs Open MPI and mpi4py)"
            ) from exc


class Transport(ABC):
    rank: int
    world_size: int

    @abstractmethod
    def allreduce_sum(self, tensor: torch.Tensor) -> None: ...

    @abstractmethod
    def broadcast(self, tensor: torch.Tensor, src: int) -> None: ...

    @abstractmethod
    def send(self, tensor: torch.Tensor, dst: int) -> None: ...

    @abstractmethod
    def recv(self, tensor: torch.Tensor, src: int) -> None: ...

    @abstractmethod
    def barrier(self) -> None: ...

    def close(self) -> None:
        pass


class GlooTransport(Transport):
    def __init__(self, ctx, timeout_s: float):
        import torch.distributed as dist

        self.dist, self.timeout = dist, timedelta(seconds=timeout_s)
        dist.init_process_group(
            "gloo", init_method=f"tcp://{ctx.master_addr}:{ctx.master_port}",
            rank=ctx.rank, world_size=ctx.world_size, timeout=self.timeout,
        )
        self.rank, self.world_size = ctx.rank, ctx.world_size

    def allreduce_sum(self, tensor):
        self.dist.all_reduce(tensor, async_op=True).wait(self.timeout)

    def broadcast(self, tensor, src):
        self.dist.broadcast(tensor, src, async_op=True).wait(self.timeout)

    def send(self, tensor, dst):
        self.dist.isend(tensor, dst).wait(self.timeout)

    def recv(self, tensor, src):
        self.dist.irecv(tensor, src).wait(self.timeout)

    def barrier(self):
        self.dist.barrier(async_op=True).wait(self.timeout)

    def close(self):
        if self.dist.is_initialized():
            self.dist.destroy_process_group()


class MpiTransport(Transport):
    """mpi4py on MPI_COMM_WORLD; nonblocking calls polled against a deadline."""

    def __init__(self, ctx, timeout_s: float):
        from mpi4py import MPI

        self.MPI, self.comm, self.timeout_s = MPI, MPI.COMM_WORLD, timeout_s
        self.rank, self.world_size = self.comm.Get_rank(), self.comm.Get_size()
        if (self.rank, self.world_size) != (ctx.rank, ctx.world_size):
            raise RuntimeError(f"MPI rank {self.rank}/{self.world_size} disagrees with RANK/WORLD_SIZE "
                               f"{ctx.rank}/{ctx.world_size}")

    def _wait(self, request, what: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        while not request.Test():
            if time.monotonic() > deadline:
                raise TimeoutError(f"MPI {what} on rank {self.rank} timed out after {self.timeout_s:.0f} s")
            time.sleep(0.0002)

    def allreduce_sum(self, tensor):
        self._wait(self.comm.Iallreduce(self.MPI.IN_PLACE, tensor.numpy(), op=self.MPI.SUM), "allreduce")

    def broadcast(self, tensor, src):
        self._wait(self.comm.Ibcast(tensor.numpy(), root=src), f"broadcast from {src}")

    def send(self, tensor, dst):
        self._wait(self.comm.Isend(tensor.numpy(), dest=dst), f"send to {dst}")

    def recv(self, tensor, src):
        self._wait(self.comm.Irecv(tensor.numpy(), source=src), f"recv from {src}")

    def barrier(self):
        self._wait(self.comm.Ibarrier(), "barrier")


def connect(cfg, ctx) -> Transport:
    cls = MpiTransport if cfg.transport == "mpi" else GlooTransport
    return cls(ctx, float(cfg.timeouts.collective_s))


def flatten(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


def unflatten_into(flat: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    offset = 0
    for t in tensors:
        t.copy_(flat[offset:offset + t.numel()].view_as(t))
        offset += t.numel()


def payload_bytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()
