"""ps: parameter server. Servers (ranks peers..peers+servers-1) hold size-balanced shards of the parameters and
their optimizer; each step a worker pushes its gradient shards and pulls the fresh parameter shards back. Messages,
deadlines, modes, bytes and figures: docs/strategies.md (ps)."""
import functools
import operator
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from omegaconf import DictConfig
from torch import nn

from job.rules import above, integer_from, one_of
from strategies.base import SERVER, WORKER, LaunchSpec, StepReport
from strategies.transport import Transport, TransportStrategy, flatten, payload_bytes, unflatten_into

MODES = ("sync", "async")
TAG_PUSH, TAG_PULL, TAG_TRAINED = 11, 12, 13
PUSH_HEADER, PULL_HEADER = 3, 3  # [samples, version, last], [version, staleness, update_s]
T = TypeVar("T", bound=torch.Tensor)


def partition(sizes: list[int], bins: int) -> list[list[int]]:
    """Indices of `sizes` split into `bins` groups of near-equal total (largest first, onto the lightest)."""
    groups: list[list[int]] = [[] for _ in range(bins)]
    loads = [0] * bins
    for index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        lightest = loads.index(min(loads))
        groups[lightest].append(index)
        loads[lightest] += sizes[index]
    return [sorted(g) for g in groups]


def shard_of(params: Sequence[T], servers: int, server_index: int) -> list[T]:
    groups = partition([p.numel() for p in params], servers)
    return [params[i] for i in groups[server_index]]


@dataclass
class ServerStats:
    updates: int = 0
    pushes: int = 0
    bytes_sent: int = 0
    bytes_recv: int = 0
    comm_s: float = 0.0
    opt_s: float = 0.0
    staleness: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        figures: dict[str, Any] = {k: v for k, v in self.__dict__.items() if k != "staleness"}
        if self.staleness:
            figures |= {"staleness_mean": statistics.fmean(self.staleness), "staleness_max": max(self.staleness),
                        "staleness_histogram": {str(s): self.staleness.count(s) for s in sorted(set(self.staleness))}}
        return figures


class ShardServer:
    """Holds one parameter shard and its optimizer; serves pushes until every worker sent its last."""

    def __init__(self, transport: Transport, params: Sequence[torch.Tensor], optimizer: torch.optim.Optimizer,
                 workers: list[int], mode: str, idle_timeout_s: float | None = None) -> None:
        self.transport, self.params, self.optimizer = transport, params, optimizer
        self.workers, self.mode, self.idle_timeout_s = list(workers), mode, idle_timeout_s
        self.version = 0
        self.update_s = 0.0  # the last update's time, sent with the replies to it
        self.stats = ServerStats()

    def run(self) -> ServerStats:
        for worker in self.workers:  # initial parameters
            self._reply(worker, staleness=0)
        active = set(self.workers)
        waiting: dict[int, tuple[float, torch.Tensor]] = {}  # sync: this round's pushes
        finishing: set[int] = set()
        push = torch.empty(PUSH_HEADER + sum(p.numel() for p in self.params))
        while active:
            start = time.perf_counter()
            worker = self.transport.recv_any(push, TAG_PUSH, self.idle_timeout_s)
            samples, worker_version, last = push[:PUSH_HEADER].tolist()
            if last and not samples:  # a worker stopped at the target, after training: not a round's push
                active.discard(worker)
                continue
            self.stats.comm_s += time.perf_counter() - start
            self.stats.pushes += 1
            self.stats.bytes_recv += payload_bytes(push)
            if last:
                finishing.add(worker)
            if self.mode == "async":
                staleness = self.version - int(worker_version)
                self.stats.staleness.append(staleness)
                self._update([(samples, push[PUSH_HEADER:])])
                self._reply(worker, staleness)
                done = {worker} & finishing
            else:
                waiting[worker] = (samples, push[PUSH_HEADER:].clone())
                if len(waiting) < len(active):
                    continue
                self._update([waiting[w] for w in sorted(waiting)])
                for w in sorted(waiting):
                    self._reply(w, staleness=0)
                done = set(waiting) & finishing
                waiting.clear()
            active -= done
        return self.stats

    def _update(self, pushes: list[tuple[float, torch.Tensor]]) -> None:
        """One optimizer step on the samples-weighted mean of the pushed gradients."""
        start = time.perf_counter()
        total = sum(samples for samples, _ in pushes)
        weighted = [grad * (samples / total) for samples, grad in pushes] if len(pushes) > 1 else [pushes[0][1]]
        grad = functools.reduce(operator.add, weighted)
        grads = []
        for p in self.params:
            if p.grad is None:
                p.grad = torch.empty_like(p)
            grads.append(p.grad)
        unflatten_into(grad, grads)
        self.optimizer.step()
        self.version += 1
        self.stats.updates += 1
        self.update_s = time.perf_counter() - start
        self.stats.opt_s += self.update_s

    def _reply(self, worker: int, staleness: int) -> None:
        start = time.perf_counter()
        header = torch.tensor([float(self.version), float(staleness), self.update_s])
        pull = torch.cat([header, flatten([p.detach() for p in self.params])])
        self.transport.send(pull, worker, TAG_PULL)
        self.stats.bytes_sent += payload_bytes(pull)
        self.stats.comm_s += time.perf_counter() - start


class ShardClient:
    """A worker's side: push gradient shards to every server, pull parameter shards back."""

    def __init__(self, transport: Transport, params: Sequence[torch.Tensor], servers: list[int]) -> None:
        self.transport, self.servers = transport, servers
        self.shards = [shard_of(params, len(servers), i) for i in range(len(servers))]
        self.versions = [0] * len(servers)

    def pull_initial(self) -> None:
        self._pull_all()

    def push_pull(self, samples: int, last: bool) -> "Exchange":
        sends, pushed = [], []
        for server, shard, version in zip(self.servers, self.shards, self.versions):
            header = torch.tensor([float(samples), float(version), float(last)])
            grads = [p.grad for p in shard if p.grad is not None]
            assert len(grads) == len(shard)  # the strategy's fill_missing_grads() gave every parameter one
            push = torch.cat([header, flatten(grads)])
            sends.append(self.transport.isend(push, server, TAG_PUSH))
            pushed.append(payload_bytes(push))
        exchange = self._pull_all()
        for pending in sends:
            pending.wait()
        for server, sent in zip(self.servers, pushed):
            exchange.peer_bytes[server][0] = sent
        return exchange

    def leave(self) -> None:
        """Tell every server this worker sends no more gradients: a push of no samples marked last, not applied."""
        for server, shard, version in zip(self.servers, self.shards, self.versions):
            header = torch.tensor([0.0, float(version), 1.0])
            self.transport.send(torch.cat([header, torch.zeros(sum(p.numel() for p in shard))]), server, TAG_PUSH)

    def _pull_all(self) -> "Exchange":
        pulls = [torch.empty(PULL_HEADER + sum(p.numel() for p in shard)) for shard in self.shards]
        pending = [self.transport.irecv(pull, server, TAG_PULL) for pull, server in zip(pulls, self.servers)]
        exchange = Exchange()
        for i, (wait, pull, shard) in enumerate(zip(pending, pulls, self.shards)):
            wait.wait()
            self.versions[i] = int(pull[0])
            exchange.staleness = max(exchange.staleness, int(pull[1]))
            exchange.update_s.append(float(pull[2]))
            with torch.no_grad():
                unflatten_into(pull[PULL_HEADER:], [p.data for p in shard])
            exchange.peer_bytes[self.servers[i]] = [0, payload_bytes(pull)]
        return exchange


@dataclass
class Exchange:
    """One push-pull of a worker: per server [bytes sent, received], staleness, the servers' update times."""

    peer_bytes: dict[int, list[int]] = field(default_factory=dict)
    staleness: int = 0
    update_s: list[float] = field(default_factory=list)


def build_server_model(cfg: DictConfig) -> torch.nn.Module:
    """The same model (and initialisation) the workers build."""
    from job.data import load_splits
    from job.model import build_model

    torch.manual_seed(cfg.seed)
    splits = load_splits(cfg)
    return build_model(cfg, splits.num_classes, splits.channels)


class ParameterServer(TransportStrategy):
    rules = {"servers": integer_from(1), "idle_timeout_s": above(0), "mode": one_of(*MODES)}
    stops_together = True  # sync: the workers meet at every pause, and leave the servers' rounds together

    @classmethod
    def stops_at_target(cls, cfg: DictConfig) -> bool:
        return cfg.ps.mode == "sync"  # async: a pause would change which gradients arrive stale

    @classmethod
    def lockstep(cls, cfg: DictConfig) -> bool:
        return cfg.ps.mode == "sync"  # async: each worker's gradient is applied on its own

    @classmethod
    def launch_spec(cls, cfg: DictConfig) -> LaunchSpec:
        spec = super().launch_spec(cfg)
        spec.roles = [WORKER] * cfg.peers + [SERVER] * int(cfg.ps.servers)
        if cfg.ps.mode == "async":  # each gradient is applied on its own
            spec.effective_batch = cfg.batch_size
        return spec

    def server_ranks(self) -> list[int]:
        return [rank for rank, role in enumerate(self.spec.roles) if role == SERVER]

    server_stats: dict[str, Any] | None = None
    staleness: list[int] | None = None

    def serve(self) -> None:
        from job.optim import build_optimizer

        # the shard and its optimizer before the rendezvous, while the workers build theirs (not while they wait)
        params = [p for p in build_server_model(self.cfg).parameters() if p.requires_grad]
        shard = shard_of(params, int(self.cfg.ps.servers), self.ctx.rank - self.cfg.peers)
        optimizer = build_optimizer(shard, self.cfg, self.spec.effective_batch)
        workers = list(range(self.cfg.peers))
        server = ShardServer(self.connect(), shard, optimizer, workers, self.cfg.ps.mode,
                             float(self.cfg.ps.idle_timeout_s))
        # a server may share a worker's core: it exits only after every worker's trained(), outside the measurement
        trained = [self.connected().irecv(torch.zeros(1), worker, TAG_TRAINED) for worker in workers]
        self.server_stats = server.run().as_dict() | {
            "shard_bytes": sum(payload_bytes(p) for p in shard), "shard_tensors": len(shard)}
        for pending in trained:
            pending.wait()

    def setup(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> nn.Module:
        super().setup(model, optimizer)
        self.client = ShardClient(self.connect(), self.trainable(), self.server_ranks())
        self.client.pull_initial()
        self.steps = 0
        self.staleness = []
        return model

    def step(self, samples: int) -> StepReport:
        """The optimizer update runs on the servers, inside the push-pull: opt_s is the slowest server's update."""
        self.steps += 1
        self.fill_missing_grads()
        start = time.perf_counter()
        exchange = self.client.push_pull(samples, last=self.steps == self.cfg.max_steps)
        assert self.staleness is not None  # setup() made it
        self.staleness.append(exchange.staleness)
        sync = self.cfg.ps.mode == "sync"
        return StepReport(opt_s=max(exchange.update_s),
                          bytes_sent=sum(s for s, _ in exchange.peer_bytes.values()),
                          bytes_recv=sum(r for _, r in exchange.peer_bytes.values()),
                          extra={"staleness": exchange.staleness, "push_pull_s": time.perf_counter() - start,
                                 "peer_bytes": exchange.peer_bytes,
                                 "link_idle_s": min(exchange.update_s) if sync else 0.0})

    def resume_together(self, claims: list[bool]) -> list[bool]:
        return super().resume_together(claims) if self.cfg.ps.mode == "sync" else claims

    def trained(self) -> None:
        if self.steps < self.cfg.max_steps:  # stopped at the target: the servers wait for no more pushes
            self.client.leave()
        for server in self.server_ranks():
            self.connected().send(torch.zeros(1), server, TAG_TRAINED)

    def summary(self) -> dict[str, Any]:
        if self.role == SERVER:
            return {"role": SERVER, **(self.server_stats or {})}
        figures: dict[str, Any] = {"role": WORKER, "mode": self.cfg.ps.mode, "servers": int(self.cfg.ps.servers)}
        if self.staleness:
            figures |= {"staleness_mean": statistics.fmean(self.staleness), "staleness_max": max(self.staleness)}
        return figures
