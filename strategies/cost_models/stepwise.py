"""stepwise's cost model: overlapping one-pass rounds along a rotating ring (strategies/stepwise.py)."""
from metrics.summary.bounds import Round
from metrics.projection.cost import Cost, CostModel


class StepwiseCost(CostModel):
    @classmethod
    def rounds_overlap(cls, knobs: dict) -> bool:
        """The ring's order is fixed and only its start rotates: a worker done with one round starts the next."""
        return True

    @classmethod
    def link_bound(cls, r: Round) -> float | None:
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
