"""localsgd's cost model: one ring all-reduce of the parameters every localsgd.every steps (strategies/localsgd.py)."""
from metrics.summary.bounds import Round
from metrics.projection.cost import Cost, ring_allreduce_s
from strategies.cost_models.allreduce import AllReduceCost


class LocalSGDCost(AllReduceCost):
    @classmethod
    def link_bound(cls, r: Round) -> float:
        """P/B, P = 2(N-1)/N x S: a round is one all-reduce of S bytes, of gradients (warm-up) or parameters."""
        return r.payload / r.rate

    @classmethod
    def step_time(cls, m: Cost) -> float:
        """compute + 2(N-1)·(α + S/(N·β)) / every, after warm-up."""
        return m.compute + ring_allreduce_s(m) / cls.steps_per_round(m.knobs)

    @classmethod
    def warmup_steps(cls, knobs: dict) -> int:
        """The synchronous warm-up and the first model average after it, at step warmup_steps + every."""
        return int(knobs.get("warmup_steps", 0)) + cls.steps_per_round(knobs)

    @classmethod
    def steps_per_round(cls, knobs: dict) -> int:
        return int(knobs.get("every", 1))
