"""ring: Horovod's DistributedOptimizer, a ring all-reduce of the gradients (gloo or MPI controller), started by
horovodrun. Gradients are all-reduced as backward produces them; step() waits for them (at most
timeouts.collective_s), then updates. bytes_sent / bytes_recv are the ring's 2(N-1)/N share of the tensors handed to
Horovod. Processes, deadlines, security and measurement: docs/strategies.md (ring).
"""
import os
import shutil
import time
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import torch
from omegaconf import DictConfig
from torch import nn

from job.device import resolve_device
from job.errors import BackendUnavailable, ConfigError
from job.rules import above, integer_from, one_of
from metrics.recording.rundir import RunDir
from strategies.base import LaunchSpec, StepReport, Strategy
from strategies.transport import ring_allreduce_bytes

CONTROLLERS = ("gloo", "mpi")
COMPRESSIONS = ("none", "fp16")
LOCAL_HOSTS = ("localhost", "127.0.0.1")
TIMELINE_NAME = "horovod_timeline.json"
# Open MPI's tuned all-reduce pinned to its ring algorithm, so the payload is the ring's.
OMPI_RING_ARGS = "--oversubscribe -mca coll_tuned_use_dynamic_rules 1 -mca coll_tuned_allreduce_algorithm 4"
# Messages up to 64 MiB (ResNet18's fused gradients over 2 ranks) go eagerly: a larger send waits for the receiver's
# rendezvous reply, queued behind its own outgoing data, and a link-bound ring's two directions take turns.
OMPI_EAGER_ARGS = "-mca btl_tcp_eager_limit 67108864 -mca btl_tcp_max_send_size 67108864"
# -H localhost:N hides oversubscription from Open MPI; when the ranks need more cores than
# this machine has, ask for what Open MPI does by itself then: yield the core while polling.
OMPI_YIELD_ARGS = "-mca mpi_yield_when_idle 1"
BUILD_HINT = "build it with `make setup` (runs scripts/build_horovod.sh: Horovod 0.28.1 with PyTorch, Gloo and MPI)"


def host_list(hosts: str | Sequence[object]) -> str:
    """ring.hosts as horovodrun's -H value: "a:2,b:2" (a list [a:2, b:2] is joined)."""
    return hosts if isinstance(hosts, str) else ",".join(str(h) for h in hosts)


def parse_hosts(hosts: str | Sequence[object]) -> list[tuple[str, int]]:
    """horovodrun's host list "a:2,b:2" -> [("a", 2), ("b", 2)]."""
    parsed = []
    for item in host_list(hosts).split(","):
        name, sep, slots = item.strip().rpartition(":")
        if not sep or not name or not slots.isdigit() or int(slots) < 1:
            raise ConfigError(f"ring.hosts must look like host1:slots,host2:slots, got {host_list(hosts)!r}")
        parsed.append((name, int(slots)))
    return parsed


def timeline_path(cfg: DictConfig, run: RunDir) -> str | None:
    """Rank 0 writes Horovod's timeline here (HOROVOD_TIMELINE, read by hvd.init)."""
    return str(run.path / TIMELINE_NAME) if cfg.ring.timeline else None


def handed_bytes(hvd: ModuleType, handles: list[int]) -> int:
    """Bytes of the tensors handed to Horovod's all-reduces `handles`, before synchronize(). Private API:
    mpi_ops._handle_map (handle -> (compressed input(s), output)); tests/unit/test_private_apis.py checks it."""
    total = 0
    for handle in handles:
        handed = hvd.mpi_ops._handle_map[handle][0]
        total += sum(t.numel() * t.element_size() for t in (handed if isinstance(handed, tuple) else (handed,)))
    return total


def pending_allreduces(optimizer: Any) -> list[int]:
    """The handles of the all-reduces Horovod started during backward (its synchronize() has no deadline). Private
    API: DistributedOptimizer._handles (parameter -> (handle, ctx)); tests/unit/test_private_apis.py checks it."""
    return [handle for handle, _ in optimizer._handles.values() if handle is not None]


class Ring(Strategy):
    rules = {"controller": one_of(*CONTROLLERS), "compression": one_of(*COMPRESSIONS),
             "backward_passes_per_step": integer_from(1), "fusion_threshold_mb": integer_from(0),
             "cycle_time_ms": above(0)}
    identical_snapshots = True  # every update applies the same all-reduced gradient
    benchmark_overrides = {"collectives": ("ring.controller=mpi",), "projection": ("ring.controller=mpi",)}

    @classmethod
    def launch_spec(cls, cfg: DictConfig) -> LaunchSpec:
        """horovodrun's arguments; the launcher adds -np, the hosts and the command."""
        ring, timeouts = cfg.ring, cfg.timeouts
        controller = cfg.ring.controller
        gloo_timeout_s = max(1, round(max(float(timeouts.collective_s), float(timeouts.startup_s))))
        args = [
            f"--{controller}",
            "--fusion-threshold-mb", str(int(ring.fusion_threshold_mb)),
            "--cycle-time-ms", str(float(ring.cycle_time_ms)),
            "--start-timeout", str(max(1, round(float(timeouts.startup_s)))),
            "--gloo-timeout-seconds", str(gloo_timeout_s),
        ]
        spec = super().launch_spec(cfg)
        if controller == "mpi":
            this_machine_only = not ring.hosts  # loopback, or emulated hosts: namespaces of this machine
            oversubscribed = this_machine_only and spec.processes * spec.threads > len(os.sched_getaffinity(0))
            mpi_args = [OMPI_RING_ARGS, OMPI_EAGER_ARGS] + ([OMPI_YIELD_ARGS] if oversubscribed else [])
            args += ["--mpi-args", " ".join(mpi_args)]
        spec.launcher, spec.launcher_args = "horovodrun", args
        spec.effective_batch *= int(ring.backward_passes_per_step)
        spec.host_args = ["-H", host_list(ring.hosts) if ring.hosts else f"localhost:{spec.processes}",
                          "--network-interface", ring.network_interface]
        return spec

    @classmethod
    def validate(cls, cfg: DictConfig) -> None:
        ring = cfg.ring
        if cfg.launch.nnodes != 1:
            raise ConfigError("strategy=ring starts the ranks of every host itself: use ring.hosts, not launch.nnodes")
        if ring.hosts:
            hosts = parse_hosts(ring.hosts)
            if sum(slots for _, slots in hosts) != cfg.peers:
                raise ConfigError(f"ring.hosts={ring.hosts} has {sum(s for _, s in hosts)} slots, peers={cfg.peers}")
            if ring.network_interface == "lo" and any(name not in LOCAL_HOSTS for name, _ in hosts):
                raise ConfigError("ring.hosts names other machines: set ring.network_interface to the NIC "
                                  "that reaches them (lo only reaches this host)")

    @classmethod
    def check_available(cls, cfg: DictConfig) -> None:
        if cfg.network.name == "emulated" and cfg.ring.hosts:  # after network=auto chose (launchers.config.validate)
            raise ConfigError("with network=emulated, strategy=ring takes no ring.hosts: the emulated hosts are "
                              "placed one rank each")
        controller = cfg.ring.controller
        try:
            import horovod.torch as hvd
        except ImportError as exc:
            raise BackendUnavailable(f"strategy=ring needs Horovod with PyTorch ({exc}); {BUILD_HINT}") from exc
        if not (hvd.gloo_built() if controller == "gloo" else hvd.mpi_built()):
            raise BackendUnavailable(f"ring.controller={controller}: this Horovod was built without "
                                     f"{controller} support; {BUILD_HINT}")
        if resolve_device(cfg.device) == "cuda":
            if not hvd.cuda_built():
                raise BackendUnavailable("device=cuda: this Horovod was built without GPU support (torch was a CPU "
                                         "build when it was compiled); install torch's CUDA build, delete the cached "
                                         "wheel and rerun scripts/build_horovod.sh (it then builds with NCCL), or "
                                         "use device=cpu")
            gpus, per_host = torch.cuda.device_count(), -(-int(cfg.peers) // int(cfg.launch.nnodes))
            if hvd.nccl_built() and per_host > gpus:
                raise BackendUnavailable(f"device=cuda: Horovod's NCCL operations need a GPU of their own for each "
                                         f"peer (NCCL refuses two ranks on one GPU: 'ncclCommInitRank failed: "
                                         f"invalid usage'), and this host has {gpus} GPU(s) for {per_host} peers; "
                                         f"ask for at most {gpus} peers per host, or device=cpu")
        if controller == "mpi" and not shutil.which("mpirun"):
            raise BackendUnavailable("ring.controller=mpi needs Open MPI's mpirun on PATH (not found); "
                                     "run `make setup` (installs openmpi-bin) or use ring.controller=gloo")

    def setup(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> nn.Module:
        import horovod.torch as hvd

        if (timeline := timeline_path(self.cfg, self.ctx.run)) is not None:
            os.environ["HOROVOD_TIMELINE"] = timeline
        hvd.init()
        if (hvd.rank(), hvd.size()) != (self.ctx.rank, self.ctx.world_size):
            raise RuntimeError(f"Horovod rank {hvd.rank()}/{hvd.size()} disagrees with the launcher's "
                               f"{self.ctx.rank}/{self.ctx.world_size}")
        self.hvd = hvd
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        fp16 = self.cfg.ring.compression == "fp16"
        self.passes_per_step = int(self.cfg.ring.backward_passes_per_step)
        wrapped = hvd.DistributedOptimizer(
            optimizer, named_parameters=model.named_parameters(),
            compression=hvd.Compression.fp16 if fp16 else hvd.Compression.none,
            backward_passes_per_step=self.passes_per_step,
        )
        if optimizer.state:
            # A fresh optimizer has no state; Horovod would create it with a zero-gradient
            # step, which (with weight decay) moves the parameters, so only real state is sent.
            wrapped.load_state_dict(optimizer.state_dict())
            hvd.broadcast_optimizer_state(wrapped, root_rank=0)
        super().setup(model, wrapped)
        for p in model.parameters():  # runs as each gradient is accumulated, when Horovod's hook hands it over
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(self._gradient_ready)
        self.passes = 0
        return model

    hvd: Any = None  # horovod.torch, once initialised (untyped)
    optimizer: Any  # Horovod's DistributedOptimizer: a class it makes at run time around the given one's
    collective_bytes = 0  # counted over the run
    first_gradient_at: float | None = None

    def _gradient_ready(self, param: torch.Tensor) -> None:
        """link_s starts at the first gradient handed to Horovod (docs/strategies.md, ring, Measurement)."""
        if self.first_gradient_at is None:
            self.first_gradient_at = time.perf_counter()

    def zero_grad(self) -> None:
        if self.passes % self.passes_per_step == 0:  # otherwise gradients are being accumulated
            self.optimizer.zero_grad()

    def step(self, samples: int) -> StepReport:
        self.passes += 1
        if self.passes % self.passes_per_step:
            self.first_gradient_at = None
            return StepReport()  # local accumulation: Horovod all-reduces after the k-th pass
        handed = handed_bytes(self.hvd, self.wait_for(pending_allreduces(self.optimizer)))  # started by backward
        self.collective_bytes += handed
        self.optimizer.synchronize()  # all done: only unpacks (and all-reduces unused parameters' zeros)
        first = self.first_gradient_at
        link_s = time.perf_counter() - first if first is not None else None  # None: no gradient handed over
        self.first_gradient_at = None
        if self.passes_per_step > 1:
            for p in self.trainable():
                if p.grad is not None:  # Horovod's synchronize() gave every parameter one
                    p.grad.div_(self.passes_per_step)  # the mean over k batches, like one k-times larger batch
        with self.optimizer.skip_synchronize():
            opt_s = self.timed_optimizer_step()
        sent = ring_allreduce_bytes(handed, self.ctx.world_size)
        return StepReport(opt_s=opt_s, bytes_sent=sent, bytes_recv=sent, link_s=link_s,
                          extra={"collective_bytes": handed})

    def resume_together(self, claims: list[bool]) -> list[bool]:
        not_made = torch.tensor([0.0 if claim else 1.0 for claim in claims])
        handle = self.hvd.allreduce_async_(not_made, name="avgbench.resume_together")
        self.wait_for([handle])  # returns once every worker has joined: a barrier, with its deadline
        self.hvd.synchronize(handle)
        return [share == 0 for share in not_made.tolist()]  # the workers' average: 0 where every one makes the claim

    def wait_for(self, handles: list[int]) -> list[int]:
        """Wait for Horovod operations to complete, within timeouts.collective_s; returns their handles."""
        timeout_s = float(self.cfg.timeouts.collective_s)
        deadline = time.monotonic() + timeout_s
        pending = handles
        while pending := [h for h in pending if not self.hvd.poll(h)]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"Horovod all-reduce on rank {self.ctx.rank} not done after {timeout_s:.0f} s "
                                   f"(timeouts.collective_s): a peer stalled or died")
            time.sleep(0.0002)
        return handles

    def summary(self) -> dict[str, Any]:
        ring = self.cfg.ring
        return {"controller": ring.controller, "compression": ring.compression,
                "backward_passes_per_step": int(ring.backward_passes_per_step),
                "fusion_threshold_mb": int(ring.fusion_threshold_mb), "cycle_time_ms": float(ring.cycle_time_ms),
                "collective_bytes": self.collective_bytes, "timeline": timeline_path(self.cfg, self.ctx.run)}

    def close(self) -> None:
        if self.hvd is not None and self.hvd.is_initialized():
            self.hvd.shutdown()
