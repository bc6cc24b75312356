"""stepwise: one-pass partial ring reduce. A running sum travels once along a ring of the workers (its start rotating
every round), in stepwise.chunks pieces; the worker at position k continues with the average of the first k+1, so only
the last holds the full average (stepwise.second_pass=true: broadcast it back, the ring reduce + broadcast baseline).
stepwise.average: params (after the local step) or grads (before it), every stepwise.every steps (docs/strategies.md).
"""
import time
from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import DictConfig
from torch import nn

from job.rules import integer_from, one_of
from strategies.base import LaunchSpec, StepReport
from strategies.transport import (Transport, TransportStrategy, broadcast_initial_state, flatten, payload_bytes,
                                  unflatten_into)

AVERAGES = ("params", "grads")
TAG_REDUCE, TAG_BROADCAST = 21, 22


@dataclass
class RoundResult:
    mean: torch.Tensor  # average over the first `count` workers of the ring
    count: int
    position: int
    bytes_sent: int
    bytes_recv: int


def ring_order(world_size: int, round_index: int, rotate: bool) -> list[int]:
    """The ring of one round: ranks in order, starting at a worker that rotates with the round."""
    start = round_index % world_size if rotate else 0
    return [(start + i) % world_size for i in range(world_size)]


def ring_round(transport: Transport, tensor: torch.Tensor, ring: list[int], chunks: int = 1,
               second_pass: bool = False) -> RoundResult:
    """One pass of a running sum along `ring` (then a broadcast pass if second_pass): this worker's average over
    itself and the workers before it in the ring (all of them with second_pass); `tensor` is not modified."""
    n, pos = len(ring), ring.index(transport.rank)
    prev = ring[pos - 1] if pos > 0 else None
    after = ring[pos + 1] if pos < n - 1 else None
    own = tensor.reshape(-1)
    total = torch.empty_like(own) if prev is not None else own.clone()

    def pieces(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.tensor_split(t, max(1, min(chunks, t.numel())))

    sent = received = 0
    sends = []
    incoming = [transport.irecv(c, prev, TAG_REDUCE) for c in pieces(total)] if prev is not None else []
    for i, (piece, own_piece) in enumerate(zip(pieces(total), pieces(own))):
        if prev is not None:
            incoming[i].wait()
            piece += own_piece
            received += payload_bytes(piece)
        targets = [after] if after is not None else ([ring[0]] if second_pass and n > 1 else [])
        for dst in targets:
            sends.append(transport.isend(piece, dst, TAG_REDUCE if after is not None else TAG_BROADCAST))
            sent += payload_bytes(piece)
    count = pos + 1
    if second_pass and after is not None:
        source = ring[pos - 1]  # the worker before it (the last, for the first)
        forward = ring[pos + 1] if pos < n - 2 else None
        total = torch.empty_like(own)
        incoming = [transport.irecv(c, source, TAG_BROADCAST) for c in pieces(total)]
        for piece, pending in zip(pieces(total), incoming):
            pending.wait()
            received += payload_bytes(piece)
            if forward is not None:
                sends.append(transport.isend(piece, forward, TAG_BROADCAST))
                sent += payload_bytes(piece)
        count = n
    for pending in sends:
        pending.wait()
    return RoundResult((total / count).view_as(tensor), count, pos, sent, received)


class Stepwise(TransportStrategy):
    summed_counters = ("rounds", "rounds_with_full_average")
    stops_together = True  # workers may differ between full averages
    rules = {"average": one_of(*AVERAGES), "every": integer_from(1), "chunks": integer_from(1)}

    @classmethod
    def launch_spec(cls, cfg: DictConfig) -> LaunchSpec:
        spec = super().launch_spec(cfg)
        if cfg.stepwise.average == "params":  # every worker updates on its own batch
            spec.effective_batch = cfg.batch_size
        return spec

    @classmethod
    def averaging_period(cls, cfg: DictConfig) -> tuple[int, int]:
        return 0, int(cfg.stepwise.every)

    def setup(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> nn.Module:
        super().setup(model, optimizer)
        broadcast_initial_state(self.connect(), model)
        return model

    steps = rounds = full_rounds = 0
    round_s = 0.0

    def step(self, samples: int) -> StepReport:
        knobs = self.cfg.stepwise
        self.steps += 1
        grads = self.fill_missing_grads()
        averaging = self.steps % int(knobs.every) == 0
        report = StepReport(extra={"averaged_over": 0, "ring_position": None})
        if averaging and knobs.average == "grads":
            self._average(grads, report)
        report.opt_s = self.timed_optimizer_step()
        if averaging and knobs.average == "params":
            self._average([p.data for p in self.trainable()], report)
        return report

    def _average(self, tensors: list[torch.Tensor], report: StepReport) -> None:
        knobs = self.cfg.stepwise
        start = time.perf_counter()
        ring = ring_order(self.ctx.world_size, self.rounds, bool(knobs.rotate))
        result = ring_round(self.connected(), flatten(tensors), ring, int(knobs.chunks), bool(knobs.second_pass))
        unflatten_into(result.mean, tensors)
        round_s = time.perf_counter() - start
        report.bytes_sent, report.bytes_recv, report.round = result.bytes_sent, result.bytes_recv, self.rounds
        report.extra = {"averaged_over": result.count, "ring_position": result.position, "round_s": round_s}
        self.rounds += 1
        self.full_rounds += result.count == self.ctx.world_size
        self.round_s += round_s

    def summary(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "rounds_with_full_average": self.full_rounds,
                "mean_round_s": self.round_s / self.rounds if self.rounds else None}
