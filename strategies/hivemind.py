"""hivemind: decentralized averaging, each peer with its own DHT and hivemind.Optimizer, stopping together on the
shared epoch boundary `target_epoch`. Rendezvous, run length, BatchNorm and accounting: docs/strategies.md."""
import contextlib
import ctypes
import functools
import itertools
import json
import math
import os
import signal
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypedDict

import psutil
import torch
from omegaconf import DictConfig
from torch import nn

from job.errors import BackendUnavailable, ConfigError
from job.rules import Rule, above, integer, integer_from, one_of
from job.model import parameter_digest
from job.optim import build_optimizer
from job.process import exit_on_sigterm, wait_until
from strategies import hivemind_internals
from metrics.recording.jsonl import JsonlWriter
from metrics.recording.rundir import RunDir
from strategies.base import LaunchSpec, StepReport, Strategy

if TYPE_CHECKING:  # hivemind ships no type information: these name its classes (Any to mypy)
    from hivemind import DHT
    from hivemind import Optimizer as HivemindOptimizer
    from hivemind.compression import CompressionBase
    from torch.distributed import TCPStore

MADDRS_FILE = "hivemind_maddrs"             # RUN/.avgbench/: rank 0's multiaddrs
OWN_FILES = "hivemind_files.json"           # peer<RANK>/: its process ids and sockets
EPOCHS_FILE = "hivemind_epochs.jsonl"       # peer<RANK>/: one line per epoch
COMPRESSIONS = {
    "none": "NoCompression", "fp16": "Float16Compression", "scaled_fp16": "ScaledFloat16Compression",
    "uniform_8bit": "Uniform8BitQuantization", "quantile_8bit": "Quantile8BitQuantization",
}
HEARTBEAT_S = 2.0
HEARTBEAT_TTL_S = 12.0
PR_SET_PDEATHSIG = 1
BOOTSTRAP_FAILED = "bootstrap failed"  # hivemind DHTNode's error when no initial peer answered a ping


def target_epoch(cfg: DictConfig) -> int:
    """The epoch at which the swarm has trained max_steps steps' samples on every peer."""
    return max(1, math.ceil(cfg.max_steps * cfg.peers * cfg.batch_size / cfg.hivemind.target_batch_size))


def start_dht(hivemind: ModuleType, timeout: float, **dht_args: Any) -> "DHT":
    """hivemind.DHT(start=True, **dht_args), retried for `timeout` s while no initial peer answers its bootstrap."""
    deadline = time.monotonic() + timeout
    for attempt in itertools.count(1):
        try:
            return hivemind.DHT(start=True, startup_timeout=max(1.0, deadline - time.monotonic()), **dht_args)
        except Exception as exc:
            if BOOTSTRAP_FAILED not in str(exc) or time.monotonic() >= deadline:
                raise
            print(f"hivemind: no initial peer answered the DHT's bootstrap ping (attempt {attempt}); "
                  f"trying again for {deadline - time.monotonic():.0f} s more", flush=True)


def compression(name: str) -> "CompressionBase":
    import hivemind.compression

    return getattr(hivemind.compression, COMPRESSIONS[name])()


def _kill_with_parent() -> None:
    """In a forked child (DHT, averagers): die when the peer process dies, even by SIGKILL."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class Hivemind(Strategy):
    summed_counters = ("allreduce_rounds_done", "allreduce_rounds_failed", "state_download_bytes_recv",
                       "log_local_gradients", "log_no_group", "log_out_of_sync", "log_state_downloaded")
    failure_counters = ("allreduce_rounds_failed", "log_no_group")
    # 2 peers x 32 samples and a 64-sample target: one step per peer per epoch; short matchmaking and deadlines
    quick = ("hivemind.target_batch_size=64", "hivemind.matchmaking_time=2", "hivemind.request_timeout=1",
             "hivemind.averaging_timeout=10", "eval_every=0")
    synchronous = False  # a round averages whichever peers matchmaking found; the others train on
    benchmark_overrides = {  # epochs sized to each benchmark's few steps, short matchmaking
        "collectives": ("hivemind.target_batch_size=64", "hivemind.delay_state_averaging=false"),
        "projection": ("hivemind.matchmaking_time=2", "hivemind.request_timeout=1", "hivemind.target_batch_size=256"),
        "emulation": ("hivemind.target_batch_size=320", "hivemind.matchmaking_time=2", "hivemind.request_timeout=1")}
    rules = {"matchmaking_time": above(0), "average_state_every": integer_from(1),
             "grad_compression": one_of(*COMPRESSIONS), "state_averaging_compression": one_of(*COMPRESSIONS),
             "run_id": Rule(lambda v: "." not in str(v), "must not contain '.' (hivemind's averagers name their DHT "
                                                        "keys with it)"),
             "port": Rule(lambda v: isinstance(v, int) and integer(v) and 0 <= v < 65536, "must be in [0, 65535]")}

    @classmethod
    def launch_spec(cls, cfg: DictConfig) -> LaunchSpec:
        spec = super().launch_spec(cfg)
        spec.tolerate_peer_loss = True  # the swarm goes on; the loss is recorded
        # gradients: one update per epoch of target_batch_size samples; local updates: one per batch
        spec.effective_batch = cfg.batch_size if cfg.hivemind.use_local_updates else cfg.hivemind.target_batch_size
        return spec

    @classmethod
    def validate(cls, cfg: DictConfig) -> None:
        hm = cfg.hivemind

        def require(ok: bool, message: str) -> None:
            if not ok:
                raise ConfigError(message)

        require(hm.target_batch_size >= cfg.batch_size,
                f"hivemind.target_batch_size={hm.target_batch_size} is smaller than batch_size={cfg.batch_size}")
        require(hm.averaging_timeout > hm.matchmaking_time,
                "hivemind.averaging_timeout must exceed hivemind.matchmaking_time")
        require(0 < hm.request_timeout < hm.matchmaking_time,
                "hivemind.request_timeout must be > 0 and below hivemind.matchmaking_time "
                "(hivemind deadlocks otherwise)")
        require(not hm.delay_grad_averaging or hm.delay_optimizer_step,
                "hivemind.delay_grad_averaging needs hivemind.delay_optimizer_step=true")
        require(not (hm.use_local_updates and (hm.delay_optimizer_step or hm.delay_grad_averaging)),
                "hivemind.use_local_updates=true cannot delay the optimizer step or gradient averaging")
        clients = set(hm.client_mode_peers)
        require(clients <= set(range(cfg.peers)), f"hivemind.client_mode_peers {sorted(clients)} are not ranks "
                                                  f"0..{cfg.peers - 1}")
        require(len(clients) < cfg.peers, "hivemind needs at least one peer that is not in client mode")
        require(0 not in clients or hm.initial_peers, "rank 0 bootstraps the DHT and cannot be a client "
                                                      "(unless hivemind.initial_peers names a running peer)")
        require(hm.port == 0 or cfg.peers // cfg.launch.nnodes == 1,
                "a fixed hivemind.port needs one peer per host (launch.nnodes=peers)")

    @classmethod
    def check_available(cls, cfg: DictConfig) -> None:
        import importlib.util

        if importlib.util.find_spec("hivemind") is None:
            raise BackendUnavailable("strategy=hivemind needs the hivemind package (pip install hivemind==1.1.12, "
                                     "see constraints.txt; `make setup` installs it)")

    def setup(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> nn.Module:
        import hivemind

        self.model, self.hm = model, self.cfg.hivemind
        self.counters = hivemind_internals.Counters()
        hivemind_internals.install(self.counters, str(self.ctx.peer.rounds))
        os.register_at_fork(after_in_child=_kill_with_parent)
        self.client = self.ctx.rank in set(self.hm.client_mode_peers)
        self.dht = self._start_dht(hivemind)
        self.opt = self._make_optimizer(hivemind, model)
        self._time_global_step()
        exit_on_sigterm()  # hivemind.Optimizer set SIGINT to ignored
        self.optimizer = self.opt  # zero_grad() goes through hivemind's view of the parameters
        self._record_own_files()
        self.target_epoch = target_epoch(self.cfg)
        self.epochs = JsonlWriter(self.ctx.peer.file(EPOCHS_FILE))
        self.last_counts = self.counters.snapshot()
        self.last_epoch, self.swarm_seen = self.opt.local_epoch, False
        self.heartbeat_stop = threading.Event()
        threading.Thread(target=self._heartbeat, name="avgbench-hivemind-heartbeat", daemon=True).start()
        self._wait_for_all("ready", float(self.cfg.timeouts.startup_s), fail=True)
        return model

    global_step_s = 0.0  # time inside hivemind's optimizer update (the "global step") on the training thread

    def _time_global_step(self) -> None:
        """Time the wrapped optimizer's updates that opt.step() waits for (not delayed ones) into global_step_s."""
        if self.hm.delay_optimizer_step:
            return
        assert self.opt is not None  # setup() made it
        inner = self.opt.state_averager.optimizer
        update = inner.step

        def timed_update(*args: Any, **kwargs: Any) -> float | None:
            start = self.update_clock()
            try:
                return update(*args, **kwargs)
            finally:
                self.global_step_s += self.update_clock(end=True) - start

        inner.step = timed_update

    # what setup has started so far (close() ends just that)
    dht: "DHT | None" = None
    opt: "HivemindOptimizer | None" = None
    epochs: JsonlWriter | None = None
    own_files: "OwnFiles | None" = None
    bootstrap_store: "TCPStore | None" = None
    heartbeat_stop: threading.Event | None = None

    def _start_dht(self, hivemind: ModuleType) -> "DHT":
        maddrs_file = self.ctx.run.file(MADDRS_FILE)
        initial_peers = list(self.hm.initial_peers)
        if not initial_peers and self.ctx.rank != 0:
            initial_peers = self._store_bootstrap() if self._hosts_apart() else self._wait_for_bootstrap(maddrs_file)
        host = os.environ.get("AVGBENCH_PEER_ADDR", self.hm.host)  # network=emulated: this peer's host address
        host_maddrs = [f"/ip4/{host}/tcp/{self.hm.port}"]
        try:
            dht = start_dht(hivemind, float(self.cfg.timeouts.startup_s), host_maddrs=host_maddrs,
                            initial_peers=initial_peers, client_mode=self.client, nat_port_map=False)
        except Exception as exc:
            raise RuntimeError(f"hivemind DHT of rank {self.ctx.rank} failed to start on {host_maddrs} "
                               f"(initial peers {initial_peers}): {exc}") from exc
        visible = [str(m) for m in dht.get_visible_maddrs()]
        print(f"hivemind: rank {self.ctx.rank} visible at {visible}", flush=True)
        if self.ctx.rank == 0 and not self.hm.initial_peers:
            if self._hosts_apart():
                self.bootstrap_store = self._bootstrap_store(is_master=True)
                self.bootstrap_store.set(MADDRS_FILE, "\n".join(visible))
            tmp = maddrs_file.with_suffix(".tmp")
            tmp.write_text("\n".join(visible))
            tmp.rename(maddrs_file)
        return dht

    def _hosts_apart(self) -> bool:
        """Some ranks run on other hosts (launch.nnodes > 1), which see no run folder of this one."""
        return self.ctx.world_size > self.ctx.local_world_size

    def _bootstrap_store(self, is_master: bool) -> "TCPStore":
        from datetime import timedelta

        from torch.distributed import TCPStore

        return TCPStore(self.ctx.master_addr, self.ctx.master_port, is_master=is_master, wait_for_workers=False,
                        timeout=timedelta(seconds=float(self.cfg.timeouts.startup_s)))

    def _store_bootstrap(self) -> list[str]:
        try:
            return self._bootstrap_store(is_master=False).get(MADDRS_FILE).decode().split()
        except RuntimeError as exc:  # the store's timeout, or rank 0's host unreachable
            raise TimeoutError(f"no hivemind peer found: rank 0 did not publish its address at "
                               f"{self.ctx.master_addr}:{self.ctx.master_port} within timeouts.startup_s="
                               f"{float(self.cfg.timeouts.startup_s):.0f} s ({exc}); see rank 0's peer0/output.log "
                               "on the first node") from exc

    def _wait_for_bootstrap(self, maddrs_file: Path) -> list[str]:
        timeout = float(self.cfg.timeouts.startup_s)
        if not wait_until(maddrs_file.exists, timeout, interval=0.1):
            raise TimeoutError(f"no hivemind peer found: rank 0 did not publish its address ({maddrs_file}) "
                               f"within timeouts.startup_s={timeout:.0f} s; see peer0/output.log")
        return maddrs_file.read_text().split()

    def _make_optimizer(self, hivemind: ModuleType, model: nn.Module) -> "HivemindOptimizer":
        from hivemind.optim.grad_averager import GradientAverager

        hm, cfg = self.hm, self.cfg
        params = [p for p in model.parameters() if p.requires_grad]
        bn_buffers = [b for b in model.buffers() if b.is_floating_point()] if hm.average_bn_buffers else []
        averager_opts: dict[str, Any] = {"request_timeout": float(hm.request_timeout)}
        grad_factory = None if hm.use_local_updates else functools.partial(GradientAverager, **averager_opts)
        if any(p.device.type != "cpu" for p in params):  # the state averager shares tensors in place on the CPU only
            averager_opts["reuse_tensors"] = False  # (offload_optimizer would reuse the GPU's BatchNorm buffers)
        with hivemind_internals.cloning_state_averager():
            return hivemind.Optimizer(
                dht=self.dht, run_id=hm.run_id, params=params,
                optimizer=functools.partial(build_optimizer, cfg=cfg, effective_batch=self.spec.effective_batch),
                batch_size_per_step=cfg.batch_size, target_batch_size=hm.target_batch_size,
                use_local_updates=hm.use_local_updates, matchmaking_time=float(hm.matchmaking_time),
                averaging_timeout=float(hm.averaging_timeout), average_state_every=hm.average_state_every,
                delay_optimizer_step=hm.delay_optimizer_step, delay_grad_averaging=hm.delay_grad_averaging,
                delay_state_averaging=hm.delay_state_averaging,
                grad_compression=compression(hm.grad_compression),
                state_averaging_compression=compression(hm.state_averaging_compression),
                grad_averager_factory=grad_factory, averager_opts=averager_opts,
                extra_tensors=bn_buffers, client_mode=self.client, verbose=True,
            )

    def step(self, samples: int) -> StepReport:
        """Accumulate or average (hivemind decides); at the target epoch also `_finish`, counted in this step."""
        assert self.opt is not None  # setup() made it
        start, updates_before = self.update_clock(), self.global_step_s
        self.counters.set("local_epoch", self.opt.local_epoch)
        self.opt.step(batch_size=samples)
        self.counters.set("local_epoch", self.opt.local_epoch)
        local_s = self.update_clock(end=True) - start  # before the wait for the swarm, which is no update
        waited = self._wait_for_swarm() if not self.swarm_seen else 0.0
        epoch = self.opt.local_epoch
        last = epoch >= self.target_epoch
        if last:
            self._finish()
        counts = self.counters.snapshot()
        delta = {k: counts[k] - self.last_counts[k] for k in counts}
        averaged = epoch != self.last_epoch or delta["log_state_downloaded"] > 0 or last
        if epoch != self.last_epoch or last:
            self._record_epoch(epoch, counts)
        round_id = self.last_epoch
        self.last_counts, self.last_epoch = counts, epoch
        progress = self.opt.tracker.global_progress
        # on an averaging step, the global step inside it is the optimizer (at most the step's own time)
        update_s = min(local_s, self.global_step_s - updates_before)
        return StepReport(
            opt_s=update_s if averaged else local_s, last=last, round=round_id if averaged else None,
            startup_wait_s=waited,
            done=min(1.0, (epoch + progress.samples_accumulated / self.hm.target_batch_size) / self.target_epoch),
            bytes_sent=delta["allreduce_bytes_sent"], bytes_recv=delta["allreduce_bytes_recv"],
            link_s=delta["allreduce_ns"] / 1e9 if averaged else None,  # all-reduce phase, no matchmaking
            extra={
                "hivemind_epoch": epoch,
                "samples_accumulated": self.opt.local_progress.samples_accumulated,
                "swarm_samples_accumulated": progress.samples_accumulated,
                "swarm_peers": progress.num_peers,
                "averaging_rounds_done": counts["allreduce_rounds_done"],
                "averaging_rounds_failed": counts["allreduce_rounds_failed"] + counts["log_no_group"],
                "averaging_s": counts["allreduce_ns"] / 1e9,
            },
        )

    def _wait_for_swarm(self) -> float:
        """Wait until hivemind's progress tracker counts every peer (none trains alone); returns the seconds waited."""
        opt = self.opt
        assert opt is not None  # setup() made it
        started = time.perf_counter()
        timeout = float(self.cfg.timeouts.startup_s)
        if not wait_until(lambda: opt.tracker.global_progress.num_peers >= self.cfg.peers, timeout, 0.1):
            raise TimeoutError(f"hivemind's progress tracker saw {opt.tracker.global_progress.num_peers} of "
                               f"{self.cfg.peers} peers after timeouts.startup_s={timeout:.0f} s")
        self.swarm_seen = True
        return time.perf_counter() - started

    def _record_epoch(self, epoch: int, counts: dict[str, int]) -> None:
        assert self.model is not None and self.epochs is not None  # setup() made them
        flat = torch.cat([p.detach().reshape(-1).double() for p in self.model.parameters()])
        self.epochs.write({"epoch": epoch, "time": time.time(), "param_sha256": parameter_digest(self.model),
                           "param_sum": flat.sum().item(), "param_abs_sum": flat.abs().sum().item(),
                           "allreduce_bytes_sent": counts["allreduce_bytes_sent"],
                           "allreduce_bytes_recv": counts["allreduce_bytes_recv"]})

    def _finish(self) -> None:
        assert self.opt is not None  # setup() made it
        self.opt.state_averager.step(wait_for_delayed_updates=True)  # apply background averaging before we stop
        self._wait_for_all("done", float(self.hm.finish_timeout_s), fail=False)
        if self.cfg.peers > 1:  # all peers together: local steps, or a round that failed, must not remain
            self._final_state_round()

    def _final_state_round(self) -> None:
        """One synchronous round that replaces the parameters with the swarm's average (no local step follows)."""
        assert self.opt is not None  # setup() made it
        averager = self.opt.state_averager
        averager.delta_rule_averaging = False
        try:
            averager.step(averaging_round=True, delay_averaging=False,
                          averaging_opts=dict(timeout=float(self.hm.averaging_timeout)))
        except Exception as exc:  # the run's result stands; the digests will show the peers differ
            print(f"hivemind: final parameter averaging failed: {exc!r}", flush=True)

    def step_limit(self) -> int:
        """Safety cap if the swarm stalls: 4x the steps a lone peer needs to reach the target epoch."""
        return 4 * self.target_epoch * math.ceil(self.hm.target_batch_size / self.cfg.batch_size)

    def _key(self, what: str) -> str:
        return f"{self.hm.run_id}_avgbench_{what}"

    def _publish(self, what: str, ttl_s: float) -> None:
        from hivemind.utils import get_dht_time

        assert self.dht is not None  # setup() started it
        self.dht.store(self._key(what), subkey=self.ctx.rank, value=True, expiration_time=get_dht_time() + ttl_s)

    def _ranks(self, what: str) -> set[int]:
        assert self.dht is not None  # setup() started it
        found = self.dht.get(self._key(what), latest=True)
        return set(found.value) if found is not None and isinstance(found.value, dict) else set()

    def _heartbeat(self) -> None:
        stop = self.heartbeat_stop
        assert stop is not None  # setup() made it before starting this thread
        while not stop.is_set():
            with contextlib.suppress(Exception):
                self._publish("alive", HEARTBEAT_TTL_S)
            stop.wait(HEARTBEAT_S)

    def _wait_for_all(self, what: str, timeout_s: float, fail: bool) -> None:
        """ready: all peers have started (fail after timeout). done: every peer still alive has finished."""
        self._publish(what, ttl_s=3600)
        everyone = set(range(self.cfg.peers))

        def complete() -> bool:
            return (everyone if what == "ready" else self._ranks("alive")) <= self._ranks(what)

        if wait_until(complete, timeout_s, interval=0.5):
            return
        seen = sorted(self._ranks(what))
        message = f"hivemind: after {timeout_s:.0f} s only ranks {seen} of {self.cfg.peers} are {what}"
        if fail:
            raise TimeoutError(message + " (no peers found: check peer*/output.log and hivemind.initial_peers)")
        print(message + "; leaving anyway", flush=True)

    def summary(self) -> dict[str, Any]:
        assert self.opt is not None  # setup() made it
        counts = self.counters.snapshot()
        return {
            "final_epoch": self.opt.local_epoch, "target_epoch": self.target_epoch, "client_mode": self.client,
            "useful_samples": self.opt.local_epoch * self.hm.target_batch_size,
            "averaging_s": counts["allreduce_ns"] / 1e9,
            **{k: v for k, v in counts.items() if k not in ("allreduce_ns", "local_epoch")},
            "bytes_method": "serialized tensor parts this peer's all-reduce sent and received (after compression), "
                            "counted at hivemind's serialization points in all its processes",
        }

    def _record_own_files(self) -> None:
        """Remember this peer's processes and hivemind sockets, to remove what they leave behind."""
        tree = [psutil.Process(), *psutil.Process().children(recursive=True)]
        sockets: set[str] = set()
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                sockets |= {c.laddr for c in proc.net_connections(kind="unix")
                            if isinstance(c.laddr, str) and Path(c.laddr).name.startswith("hivemind-")}
        self.own_files = {"pids": [p.pid for p in tree], "sockets": sorted(sockets)}
        self.ctx.peer.file(OWN_FILES).write_text(json.dumps(self.own_files))

    def close(self) -> None:
        if self.heartbeat_stop is not None:
            with contextlib.suppress(Exception):
                self._publish("done", ttl_s=3600)  # also when stopped early: nobody waits for us
            self.heartbeat_stop.set()
        for running in (self.opt, self.dht):
            if running is not None:
                with contextlib.suppress(Exception):
                    running.shutdown()
        if self.epochs is not None:
            self.epochs.close()
        pids = self.own_files["pids"] if self.own_files else []
        children = [c for c in psutil.Process().children(recursive=True) if _is_hivemind_child(c, pids)]
        psutil.wait_procs(children, timeout=float(self.cfg.timeouts.shutdown_s))
        remove_leftovers(self.ctx.peer.file(OWN_FILES), ours=True)

    @classmethod
    def after_run(cls, cfg: DictConfig, run: RunDir) -> None:
        """Every process of the run is gone: remove what the peers' processes left in /dev/shm and /tmp."""
        for peer in run.peers():
            remove_leftovers(peer.file(OWN_FILES))


class OwnFiles(TypedDict):
    pids: list[int]
    sockets: list[str]


def _is_hivemind_child(proc: psutil.Process, pids: list[int]) -> bool:
    try:
        return proc.pid in pids and proc.name() != "torch_shm_manager"  # that one ends with our process
    except psutil.Error:
        return False


def remove_leftovers(record: Path, ours: bool = False) -> None:
    """Delete the hivemind sockets (`ours`: at once) and /dev/shm/torch_<pid>_* files a peer's processes left, the
    latter only once all of them are gone (torch aborts if a file a live process maps vanishes)."""
    if not record.exists():
        return
    files = json.loads(record.read_text())
    gone = not any(_running(pid) for pid in files["pids"])
    if gone:
        for pid in files["pids"]:
            for leaked in Path("/dev/shm").glob(f"torch_{pid}_*"):
                with contextlib.suppress(OSError):
                    leaked.unlink()
    if ours or gone:
        for socket_path in files["sockets"]:
            with contextlib.suppress(OSError):
                Path(socket_path).unlink()


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
