"""diloco's cost model: one ring all-reduce every diloco.inner_steps steps (strategies/diloco.py)."""
from metrics.summary.bounds import Round
from metrics.projection.cost import Cost, RingAllReduceCost, ring_allreduce_s


class DiLoCoCost(RingAllReduceCost):
    @classmethod
    def link_bound(cls, r: Round) -> float:
        """P/B, P = 2(N-1)/N x S: one sync is one all-reduce of the S-byte pseudo-gradient."""
        return r.payload / r.rate

    @classmethod
    def step_time(cls, m: Cost) -> float:
        """compute + 2(N-1)·(α + S/(N·β)) / H, H = diloco.inner_steps."""
        return m.compute + ring_allreduce_s(m) / cls.steps_per_round(m.knobs)

    @classmethod
    def warmup_steps(cls, knobs: dict) -> int:
        """Up to the first sync, at step H."""
        return cls.steps_per_round(knobs)

    @classmethod
    def steps_per_round(cls, knobs: dict) -> int:
        return int(knobs.get("inner_steps", 1))
