"""stepwise: one-pass partial ring reduce.

The workers form a ring, starting at a worker that rotates every round
(stepwise.rotate). A running sum travels once along it: the worker at position k
receives the sum of the k workers before it, adds its own tensor, forwards the new
sum and continues with the average of the k+1 workers up to and including itself.
There is no broadcast pass, so only the ring's last worker holds the full average;
with rotation every worker is last once every N rounds. The vector travels in
stepwise.chunks pieces, so a round takes about S/B·(1 + (N-2)/chunks) instead of
(N-1)·S/B (see link_bound).

stepwise.second_pass=true adds the classic broadcast pass: the last worker sends the
full sum to the first, which forwards it along the chain; every worker ends with the
full average (ring reduce + broadcast, the baseline).

stepwise.average=params: a local optimizer step every step, then every
stepwise.every steps the parameters are replaced by the partial average.
stepwise.average=grads: every stepwise.every steps the gradients are replaced by the
partial average before the optimizer step (local gradients on the other steps).

Bytes per round (S = bytes of the averaged vector, N workers, payload only): one pass:
a worker sends S unless it is last and receives S unless it is first, so (N-1)/N·S per
worker on average and at most S. With second_pass each worker also receives S (except
the last) and sends S (except the second to last): 2(N-1)/N·S on average; at N = 2
each worker sends S and receives S, once. Steps
without a round report 0 bytes. BatchNorm buffers and optimizer state (momentum) stay
local to each worker.
"""
import time
from dataclasses import dataclass

import torch

from job.errors import ConfigError
from metrics.summary.bounds import Round
from metrics.cost import Cost
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
    """One pass of a running sum along `ring` (then a broadcast pass if second_pass).

    Returns this worker's average over itself and the workers before it in the ring
    (all of them with second_pass). `tensor` is not modified.
    """
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
        source = ring[-1] if pos == 0 else prev
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

    @classmethod
    def rounds_overlap(cls, knobs: dict) -> bool:
        """The ring's order is fixed and only its start rotates: a worker done with one round starts the next."""
        return True

    @classmethod
    def link_bound(cls, r):
        """One pass: S/B·(1 + (N-2)/c); with second_pass: max(2S/B, S/B·(1 + (2N-3)/c)) for N >= 3, S/B·(1 + 1/c) for N = 2.

        S = the averaged vector's bytes, c = stepwise.chunks, B = the link rate. A pass is a
        chain of N-1 hops; a chunk (S/c bytes) takes at least S/(cB) per hop. The first
        worker sends its c chunks one after another (S/B), and the last of them still has
        N-2 hops to go: S/B + (N-2)·S/(cB). The broadcast pass continues the chain for N-1
        more hops (2N-3 after the first worker's), and a middle worker's uplink then carries
        2S; at N = 2 there is no middle worker, each uplink carries S once, the way back
        following the last chunk by one hop. P (the largest payload of one worker in the
        round) is S, or with second_pass 2S (S at N = 2).
        """
        chunks = int(r.knobs.get("chunks", 1))
        size = cls.averaged_bytes(r)
        if r.knobs.get("second_pass"):
            chain = size / r.rate * (1 + (2 * r.workers - 3) / chunks)
            return chain if r.workers == 2 else max(2 * size / r.rate, chain)
        return size / r.rate * (1 + (r.workers - 2) / chunks)

    @classmethod
    def step_time(cls, m: Cost) -> float:
        """compute + (H·S/(c·β) + A·α) / every, one round of a run of overlapping rounds: one pass
        H = c + min(N-2, 1+r), A = 1 (N = 2, rotating) else 3 (rotating) or 2; second_pass H = max(c + N - 1 +
        min(N-2, 2+r), 2c + min(N-3, 1+r)) (c + 1 at N = 2), A ≈ H - c + 1. r = 1 with stepwise.rotate, else 0;
        c = stepwise.chunks.

        A chunk (S/c bytes) occupies a link for h = S/(c·β). Rounds follow each other along the fixed
        ring of ranks (rank i sends to rank i+1); with rotation the round starts one rank further on,
        so the ring's positions shift back by one every round and a worker's next round starts before
        the last worker got this one's sum. Two facts of the transport set the period. (1) A send
        completes when its bytes have left (the next round's chunks queue behind this round's on the
        same link). (2) A message flows only once its receiver posted the receive (gloo's pairs, and
        MPI's rendezvous for messages this size), and a worker posts the next round's receives only
        after its own round ended and it computed (t). One pass: the next round's first sender is
        this round's position 1 (with rotation); it sends its first chunk when its receiver, this
        round's position 2, has forwarded chunk c: at (c+2)·h + 2α after the round started, then t,
        then α for its ready notice. Every later position of the next round then gets its chunk
        exactly as it becomes ready, so the period is t + (c+2)·h + 3α for N >= 4; at N = 3 the
        receiver is the last worker, done at (c+1)·h + 2α; at N = 2 the two workers swap roles, c·h + α.
        Without rotation the first sender is always rank 0 and its receiver rank 1 is done at
        (c+1)·h + α (N >= 3). second_pass: the last worker sends the full sum on to the first, which
        forwards it along the chain; the next round waits for the broadcast's last chunk to pass its
        first two senders (the chain term), and a middle worker's link carries 2c chunks per round
        (the link term). A round every `every` steps spreads its time over them. The formulas were
        checked against a chunk-level schedule of these rules for N = 2..19 and c = 1..16 (both
        rotations); the second pass's α count is within one α of it. A run's first rounds start from
        the isolated chain (c + N - 2 hops), so a short run's per-worker mean is longer by up to
        (N-2)·h/(steps-2).
        """
        chunks = int(m.knobs.get("chunks", 1))
        rotate = 1 if m.knobs.get("rotate", True) else 0
        n = m.workers
        if m.knobs.get("second_pass"):
            hops = chunks + 1 if n == 2 else max(chunks + n - 1 + min(n - 2, 2 + rotate),
                                                 2 * chunks + min(n - 3, 1 + rotate))
            latencies = hops - chunks + 1
        else:
            hops = chunks + min(n - 2, 1 + rotate)
            latencies = (1 if n == 2 else 3) if rotate else 2
        round_s = hops * m.size / (chunks * m.rate) + latencies * m.latency
        return m.compute + round_s / int(m.knobs.get("every", 1))

    @classmethod
    def averaged_bytes(cls, r: Round) -> float:
        """S = P, or P/2 with second_pass and N >= 3: a middle worker sends (and receives) S per pass; at N = 2
        each worker sends and receives S once (the first the partial sum, the last the full one)."""
        return r.payload / 2 if r.knobs.get("second_pass") and r.workers > 2 else r.payload

    @classmethod
    def validate(cls, cfg) -> None:
        super().validate(cfg)
        knobs = cfg.stepwise
        if knobs.average not in AVERAGES:
            raise ConfigError(f"stepwise.average must be one of {', '.join(AVERAGES)}, got {knobs.average}")
        for knob in ("every", "chunks"):
            if int(knobs[knob]) < 1:
                raise ConfigError(f"stepwise.{knob} must be >= 1, got {knobs[knob]}")

    @classmethod
    def launch_spec(cls, cfg) -> LaunchSpec:
        spec = super().launch_spec(cfg)
        if cfg.stepwise.average == "params":  # every worker updates on its own batch
            spec.effective_batch = cfg.batch_size
        return spec

    def setup(self, model, optimizer) -> None:
        super().setup(model, optimizer)
        self.connect()
        broadcast_initial_state(self.transport, model)
        return model

    steps = rounds = full_rounds = 0
    round_s = 0.0

    def step(self, samples: int) -> StepReport:
        knobs = self.cfg.stepwise
        self.steps += 1
        self.fill_missing_grads()
        params = self.trainable()
        averaging = self.steps % int(knobs.every) == 0
        report = StepReport(extra={"averaged_over": 0, "ring_position": None})
        if averaging and knobs.average == "grads":
            self._average([p.grad for p in params], report)
        report.opt_s = self.timed_optimizer_step()
        if averaging and knobs.average == "params":
            self._average([p.data for p in params], report)
        return report

    def _average(self, tensors: list[torch.Tensor], report: StepReport) -> None:
        knobs = self.cfg.stepwise
        start = time.perf_counter()
        ring = ring_order(self.ctx.world_size, self.rounds, bool(knobs.rotate))
        result = ring_round(self.transport, flatten(tensors), ring, int(knobs.chunks), bool(knobs.second_pass))
        unflatten_into(result.mean, tensors)
        round_s = time.perf_counter() - start
        report.bytes_sent, report.bytes_recv, report.round = result.bytes_sent, result.bytes_recv, self.rounds
        report.extra = {"averaged_over": result.count, "ring_position": result.position, "round_s": round_s}
        self.rounds += 1
        self.full_rounds += result.count == self.ctx.world_size
        self.round_s += round_s

    def summary(self) -> dict:
        return {"rounds": self.rounds, "rounds_with_full_average": self.full_rounds,
                "mean_round_s": self.round_s / self.rounds if self.rounds else None}
