"""Point-to-point and collective calls over torch.distributed (gloo) or MPI (mpi4py), on host (CPU) tensors.

Every blocking call, and every Pending's wait(), has a deadline (timeouts.collective_s): a dead or stuck peer raises
TimeoutError naming the call, never a hang.
"""
import os
import shutil
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import torch
import torch.distributed as dist
from omegaconf import DictConfig

from job.device import PeerDevice
from job.errors import BackendUnavailable, ConfigError
from strategies.base import WORKER, LaunchSpec, PeerContext, Strategy
from strategies.torch_internals import set_collective_timeout, source_rank

if TYPE_CHECKING:
    from mpi4py import MPI

TRANSPORTS = ("gloo", "mpi")
T = TypeVar("T")


def check_transport(cfg: DictConfig) -> None:
    transport = cfg.transport
    if transport == "mpi":
        if int(cfg.launch.nnodes) != 1:
            raise ConfigError("transport=mpi: mpirun starts the ranks of every host; keep launch.nnodes=1 and "
                              "list the hosts in launch.hostfile")
        if shutil.which("mpirun") is None:
            raise BackendUnavailable("transport=mpi needs Open MPI's mpirun on PATH; run `make setup` "
                                     "(installs openmpi-bin)")
        try:
            import mpi4py  # noqa: F401
        except ImportError as exc:
            raise BackendUnavailable(f"transport=mpi needs mpi4py with a real MPI ({exc}); run `make setup` "
                                     "(installs Open MPI and mpi4py)") from exc


class Pending(ABC):
    """A nonblocking send or receive in flight."""

    @abstractmethod
    def wait(self) -> None:
        """Block until done, at most the transport's deadline."""


class Transport(ABC):
    rank: int
    world_size: int

    @abstractmethod
    def allreduce_sum(self, tensor: torch.Tensor) -> None: ...

    @abstractmethod
    def broadcast(self, tensor: torch.Tensor, src: int) -> None: ...

    @abstractmethod
    def isend(self, tensor: torch.Tensor, dst: int, tag: int = 0) -> Pending: ...

    @abstractmethod
    def irecv(self, tensor: torch.Tensor, src: int, tag: int = 0) -> Pending: ...

    @abstractmethod
    def recv_any(self, tensor: torch.Tensor, tag: int = 0, timeout_s: float | None = None) -> int:
        """Receive one message from any peer (deadline: timeout_s, else the transport's); returns its rank."""

    def send(self, tensor: torch.Tensor, dst: int, tag: int = 0) -> None:
        self.isend(tensor, dst, tag).wait()

    def close(self) -> None:
        pass


class GlooPending(Pending):
    def __init__(self, work: dist.Work | None, timeout: timedelta, what: str) -> None:
        if work is None:  # what torch returns to a rank outside the group
            raise RuntimeError(f"gloo {what}: this rank is not in the process group")
        self.work, self.timeout, self.what = work, timeout, what

    def wait(self) -> None:
        try:
            self.work.wait(self.timeout)
        except RuntimeError as exc:
            if "timed out" in str(exc).lower():
                raise TimeoutError(f"gloo {self.what} timed out after {self.timeout.total_seconds():.0f} s "
                                   "(timeouts.collective_s): a peer stalled or died") from exc
            raise RuntimeError(f"gloo {self.what} failed: {exc}") from exc


class GlooTransport(Transport):
    def __init__(self, ctx: PeerContext, timeout_s: float, backend: str = "gloo", startup_s: float = 0.0) -> None:
        """Every peer joins within max(startup_s, timeout_s) (timeouts.startup_s), then each operation completes
        within timeout_s (timeouts.collective_s)."""
        self.timeout = timedelta(seconds=timeout_s)
        dist.init_process_group(
            backend, init_method=f"tcp://{ctx.master_addr}:{ctx.master_port}",
            rank=ctx.rank, world_size=ctx.world_size, timeout=timedelta(seconds=max(startup_s, timeout_s)),
        )
        set_collective_timeout(self.timeout)
        self.rank, self.world_size = ctx.rank, ctx.world_size

    def allreduce_sum(self, tensor: torch.Tensor) -> None:
        GlooPending(dist.all_reduce(tensor, async_op=True), self.timeout, f"all_reduce on rank {self.rank}").wait()

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        GlooPending(dist.broadcast(tensor, src, async_op=True), self.timeout,
                    f"broadcast from {src} on rank {self.rank}").wait()

    def isend(self, tensor: torch.Tensor, dst: int, tag: int = 0) -> Pending:
        return GlooPending(dist.isend(tensor, dst, tag=tag), self.timeout, f"send {self.rank}->{dst}")

    def irecv(self, tensor: torch.Tensor, src: int, tag: int = 0) -> Pending:
        return GlooPending(dist.irecv(tensor, src, tag=tag), self.timeout, f"recv {src}->{self.rank}")

    def recv_any(self, tensor: torch.Tensor, tag: int = 0, timeout_s: float | None = None) -> int:
        timeout = self.timeout if timeout_s is None else timedelta(seconds=timeout_s)
        pending = GlooPending(dist.irecv(tensor, src=None, tag=tag), timeout, f"recv from any peer on rank {self.rank}")
        pending.wait()
        return source_rank(pending.work)

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


# Open MPI's non-blocking in-place all-reduce defaults to a binomial tree (rank 0 carries log2(N) x S); algorithm 1 is
# its ring: 2(N-1)/N x S on every rank.
RING_IALLREDUCE = ("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1")


class MpiTransport(Transport):
    """mpi4py on MPI_COMM_WORLD; nonblocking calls polled against a deadline. allreduce_sum runs Open MPI's ring
    (RING_IALLREDUCE unless the environment names an algorithm; read on the first import of mpi4py.MPI)."""

    def __init__(self, ctx: PeerContext, timeout_s: float) -> None:
        os.environ.setdefault(*RING_IALLREDUCE)
        from mpi4py import MPI

        self.MPI, self.comm, self.timeout_s = MPI, MPI.COMM_WORLD, timeout_s
        self.rank, self.world_size = self.comm.Get_rank(), self.comm.Get_size()
        if (self.rank, self.world_size) != (ctx.rank, ctx.world_size):
            raise RuntimeError(f"MPI rank {self.rank}/{self.world_size} disagrees with RANK/WORLD_SIZE "
                               f"{ctx.rank}/{ctx.world_size}")

    def _wait(self, request: "MPI.Request", what: str, status: "MPI.Status | None" = None,
              timeout_s: float | None = None) -> None:
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        while not request.Test(status):
            if time.monotonic() > deadline:
                raise TimeoutError(f"MPI {what} on rank {self.rank} timed out after {timeout_s:.0f} s")
            time.sleep(0.0002)

    def allreduce_sum(self, tensor: torch.Tensor) -> None:
        self._wait(self.comm.Iallreduce(self.MPI.IN_PLACE, tensor.numpy(), op=self.MPI.SUM), "allreduce")

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        self._wait(self.comm.Ibcast(tensor.numpy(), root=src), f"broadcast from {src}")

    def isend(self, tensor: torch.Tensor, dst: int, tag: int = 0) -> Pending:
        return MpiPending(self, self.comm.Isend(tensor.numpy(), dest=dst, tag=tag), f"send to {dst}")

    def irecv(self, tensor: torch.Tensor, src: int, tag: int = 0) -> Pending:
        return MpiPending(self, self.comm.Irecv(tensor.numpy(), source=src, tag=tag), f"recv from {src}")

    def recv_any(self, tensor: torch.Tensor, tag: int = 0, timeout_s: float | None = None) -> int:
        status = self.MPI.Status()
        request = self.comm.Irecv(tensor.numpy(), source=self.MPI.ANY_SOURCE, tag=tag)
        self._wait(request, "recv from any peer", status, timeout_s)
        return status.Get_source()


class MpiPending(Pending):
    def __init__(self, transport: MpiTransport, request: "MPI.Request", what: str) -> None:
        self.transport, self.request, self.what = transport, request, what

    def wait(self) -> None:
        self.transport._wait(self.request, self.what)


def connect(cfg: DictConfig, ctx: PeerContext, device: PeerDevice) -> Transport:
    timeout_s = float(cfg.timeouts.collective_s)
    if cfg.transport == "mpi":
        return MpiTransport(ctx, timeout_s)
    return GlooTransport(ctx, timeout_s, device.collective_backend, float(cfg.timeouts.startup_s))


def in_process_gloo(body: Callable[[int, dist.ProcessGroupGloo], T], world: int = 2,
                    timeout_s: float = 20) -> tuple[dict[int, T], list[str]]:
    """body(rank, group) on `world` gloo ranks, each a thread of this process (a HashStore rendezvous): each rank's
    return value, and the errors raised ("Type: message")."""
    import threading

    store, results, errors = dist.HashStore(), dict[int, T](), list[str]()

    def rank(r: int) -> None:
        try:
            results[r] = body(r, dist.ProcessGroupGloo(store, r, world, timedelta(seconds=timeout_s / 2)))
        except Exception as exc:  # reported to the caller
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    return results, errors


def flatten(tensors: list[torch.Tensor]) -> torch.Tensor:
    """One contiguous host (CPU) vector of the tensors: what every transport sends (GPU tensors are copied)."""
    return torch.cat([t.reshape(-1) for t in tensors]).cpu()


def unflatten_into(flat: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    offset = 0
    for t in tensors:
        t.copy_(flat[offset:offset + t.numel()].view_as(t))
        offset += t.numel()


def payload_bytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def ring_allreduce_bytes(size: int, peers: int) -> int:
    """Bytes one worker sends (and receives) in a ring all-reduce of `size` bytes: 2(N-1)/N x size."""
    return round(2 * (peers - 1) / peers * size)


def broadcast_initial_state(transport: Transport, model: torch.nn.Module, src: int = 0) -> None:
    state = [t.data for t in [*model.parameters(), *model.buffers()] if t.is_floating_point()]
    flat = flatten(state)
    transport.broadcast(flat, src)
    unflatten_into(flat, state)


TAG_WORKERS_SUM = 91


def workers_sum(transport: Transport, tensor: torch.Tensor, workers: list[int]) -> None:
    """In place, on each of `workers` (ranks): the sum of their tensors, gathered by the first and sent back."""
    first, others = workers[0], workers[1:]
    if transport.rank != first:
        transport.send(tensor, first, TAG_WORKERS_SUM)
        transport.irecv(tensor, first, TAG_WORKERS_SUM).wait()
        return
    for rank in others:
        received = torch.empty_like(tensor)
        transport.irecv(received, rank, TAG_WORKERS_SUM).wait()
        tensor += received
    for rank in others:
        transport.send(tensor, rank, TAG_WORKERS_SUM)


class TransportStrategy(Strategy):
    """A strategy that talks over the top-level `transport`: gloo (local launcher) or MPI (mpirun)."""

    transport: Transport | None = None

    @classmethod
    def knobs(cls, cfg: DictConfig) -> dict[str, Any]:
        return {"transport": cfg.transport, **super().knobs(cfg)}

    @classmethod
    def validate(cls, cfg: DictConfig) -> None:
        check_transport(cfg)

    @classmethod
    def launch_spec(cls, cfg: DictConfig) -> LaunchSpec:
        spec = super().launch_spec(cfg)
        spec.launcher = "mpirun" if cfg.transport == "mpi" else "local"
        return spec

    def connect(self) -> Transport:
        self.transport = connect(self.cfg, self.ctx, self.device)
        return self.transport

    def connected(self) -> Transport:
        if self.transport is None:
            raise RuntimeError("no transport yet: connect() first")
        return self.transport

    def resume_together(self, claims: list[bool]) -> list[bool]:
        """The workers' sums of how many of them do not make each claim, which return once every worker has joined (a
        barrier, with the transport's deadline): an all-reduce where every process is a worker, else sent to the first
        worker and back, which a server never sees."""
        not_made = torch.tensor([0.0 if claim else 1.0 for claim in claims])
        workers = [rank for rank, role in enumerate(self.spec.roles) if role == WORKER]
        if len(workers) == len(self.spec.roles):
            self.connected().allreduce_sum(not_made)
        else:
            workers_sum(self.connected(), not_made, workers)
        return [count == 0 for count in not_made.tolist()]

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
