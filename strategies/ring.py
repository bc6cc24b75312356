"""ring: Horovod's DistributedOptimizer, a ring all-reduce of the gradients (gloo or MPI controller).

Horovod all-reduces each gradient asynchronously as soon as backward produces it
(fused into buffers of ring.fusion_threshold_mb, every ring.cycle_time_ms);
step() waits for them (comm_s: the part of the communication not hidden behind
backward) and then updates (opt_s). Rank 0's parameters and buffers, and its
optimizer state when it has any, are broadcast at the start.

Bytes are the ring algorithm's payload, 2(N-1)/N x S per worker and direction,
S = the gradient bytes as sent (float16 with ring.compression=fp16). Horovod's
gloo controller uses gloo's ring all-reduce; for the MPI controller the launcher
pins Open MPI's all-reduce to its ring algorithm. Processes are started by
horovodrun (launchers/horovod.py).
"""
import shutil
import time

from job.errors import BackendUnavailable, ConfigError
from strategies.allreduce import ring_allreduce_bytes
from strategies.base import StepReport, Strategy

CONTROLLERS = ("gloo", "mpi")
COMPRESSIONS = ("none", "fp16")
LOCAL_HOSTS = ("localhost", "127.0.0.1")
TIMELINE_NAME = "horovod_timeline.json"
BUILD_HINT = "build it with `make setup` (runs scripts/build_horovod.sh: Horovod 0.28.1 with PyTorch, Gloo and MPI)"


def host_list(hosts) -> str:
    """ring.hosts as horovodrun's -H value: "a:2,b:2" (a list [a:2, b:2] is joined)."""
    return hosts if isinstance(hosts, str) else ",".join(str(h) for h in hosts)


def parse_hosts(hosts) -> list[tuple[str, int]]:
    """horovodrun's host list "a:2,b:2" -> [("a", 2), ("b", 2)]."""
    parsed = []
    for item in host_list(hosts).split(","):
        name, sep, slots = item.strip().rpartition(":")
        if not sep or not name or not slots.isdigit() or int(slots) < 1:
            raise ConfigError(f"ring.hosts must look like host1:slots,host2:slots, got {host_list(hosts)!r}")
        parsed.append((name, int(slots)))
    return parsed


def timeline_path(cfg, run_dir) -> str | None:
    return str(run_dir / TIMELINE_NAME) if cfg.ring.timeline else None


class Ring(Strategy):
    name = "ring"

    @classmethod
    def validate(cls, cfg) -> None:
        ring = cfg.ring
        if ring.controller not in CONTROLLERS:
            raise ConfigError(f"ring.controller must be one of {', '.join(CONTROLLERS)}, got {ring.controller}")
        if ring.compression not in COMPRESSIONS:
            raise ConfigError(f"ring.compression must be one of {', '.join(COMPRESSIONS)}, got {ring.compression}")
        if int(ring.backward_passes_per_step) < 1:
            raise ConfigError(f"ring.backward_passes_per_step must be >= 1, got {ring.backward_passes_per_step}")
        if int(ring.fusion_threshold_mb) < 0 or float(ring.cycle_time_ms) <= 0:
            raise ConfigError("ring.fusion_threshold_mb must be >= 0 and ring.cycle_time_ms > 0")
        if cfg.launch.nnodes != 1:
            raise ConfigError("strategy=ring starts the ranks of every host itself: use ring.hosts, not launch.nnodes")
        if cfg.network.name == "emulated" and (ring.controller != "mpi" or ring.hosts):
            raise ConfigError("with network=emulated, strategy=ring needs ring.controller=mpi and no ring.hosts "
                              "(horovodrun --gloo does not reach emulated hosts; they are placed one rank each)")
        if ring.hosts:
            hosts = parse_hosts(ring.hosts)
            if sum(slots for _, slots in hosts) != cfg.peers:
                raise ConfigError(f"ring.hosts={ring.hosts} has {sum(s for _, s in hosts)} slots, peers={cfg.peers}")
            if ring.network_interface == "lo" and any(name not in LOCAL_HOSTS for name, _ in hosts):
                raise ConfigError("ring.hosts names other machines: set ring.network_interface to the NIC "
                                  "that reaches them (lo only reaches this host)")

    @classmethod
    def check_available(cls, cfg) -> None:
        controller = cfg.ring.controller
        try:
            import horovod.torch as hvd
        except ImportError as exc:
            raise BackendUnavailable(f"strategy=ring needs Horovod with PyTorch ({exc}); {BUILD_HINT}") from exc
        if not (hvd.gloo_built() if controller == "gloo" else hvd.mpi_built()):
            raise BackendUnavailable(f"ring.controller={controller}: this Horovod was built without "
                                     f"{controller} support; {BUILD_HINT}")
        if controller == "mpi" and not shutil.which("mpirun"):
            raise BackendUnavailable("ring.controller=mpi needs Open MPI's mpirun on PATH (not found); "
                                     "run `make setup` (installs openmpi-bin) or use ring.controller=gloo")

    @classmethod
    def launcher(cls, cfg) -> str:
        return "horovod"

    # --- inside each rank ---------------------------------------------------
    def setup(self, model, optimizer) -> None:
        import horovod.torch as hvd

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
        params = [p for p in model.parameters() if p.requires_grad]
        self.gradient_bytes = sum(p.numel() * (2 if fp16 and p.is_floating_point() else p.element_size())
                                  for p in params)
        self.wire_bytes = ring_allreduce_bytes(self.gradient_bytes, self.ctx.world_size)
        self.params = params
        self.passes = 0

    def zero_grad(self) -> None:
        if self.passes % self.passes_per_step == 0:  # otherwise gradients are being accumulated
            self.optimizer.zero_grad()

    def step(self, samples: int) -> StepReport:
        self.passes += 1
        if self.passes % self.passes_per_step:
            return StepReport()  # local accumulation: Horovod all-reduces after the k-th pass
        start = time.perf_counter()
        self.wait_for_allreduces()
        self.optimizer.synchronize()  # all done: only unpacks (and all-reduces unused parameters' zeros)
        comm_s = time.perf_counter() - start
        if self.passes_per_step > 1:
            for p in self.params:
                p.grad.div_(self.passes_per_step)  # the mean over k batches, like one k-times larger batch
        start = time.perf_counter()
        with self.optimizer.skip_synchronize():
            self.optimizer.step()
        opt_s = time.perf_counter() - start
        return StepReport(comm_s=comm_s, opt_s=opt_s, bytes_sent=self.wire_bytes, bytes_recv=self.wire_bytes)

    def wait_for_allreduces(self) -> None:
        """Wait for the all-reduces that backward started, within timeouts.collective_s."""
        timeout_s = float(self.cfg.timeouts.collective_s)
        deadline = time.monotonic() + timeout_s
        # Horovod 0.28.1 keeps the in-flight all-reduces in _handles (parameter -> (handle, ctx)).
        pending = [handle for handle, _ in self.optimizer._handles.values() if handle is not None]
        while pending := [h for h in pending if not self.hvd.poll(h)]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"Horovod all-reduce on rank {self.ctx.rank} not done after {timeout_s:.0f} s "
                                   f"(timeouts.collective_s): a peer stalled or died")
            time.sleep(0.0002)

    def summary(self) -> dict:
        ring = self.cfg.ring
        return {
            "controller": ring.controller,
            "compression": ring.compression,
            "backward_passes_per_step": int(ring.backward_passes_per_step),
            "fusion_threshold_mb": int(ring.fusion_threshold_mb),
            "cycle_time_ms": float(ring.cycle_time_ms),
            "gradient_bytes": getattr(self, "gradient_bytes", None),
            "allreduce_bytes_per_worker": getattr(self, "wire_bytes", None),
            "timeline": timeline_path(self.cfg, self.ctx.run_dir),
        }

    def close(self) -> None:
        if hasattr(self, "hvd") and self.hvd.is_initialized():
            self.hvd.shutdown()
