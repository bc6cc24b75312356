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
        """One pass: S/B·(1 + (N-2)/c); with second_pass: max(2S/B, S/B·(1 + (2N-3)/c)) for N >= 3, S/B·(1 + 1/c) for N = 2."""
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
        c = stepwise.chunks."""
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
