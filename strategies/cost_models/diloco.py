"""diloco's cost model: one ring all-reduce of the S-byte pseudo-gradient every diloco.inner_steps steps
(strategies/diloco.py)."""
from metrics.projection.cost import PeriodicRingAllReduceCost


class DiLoCoCost(PeriodicRingAllReduceCost):
    @classmethod
    def warmup_steps(cls, knobs: dict) -> int:
        """Up to the first sync, at step H."""
        return cls.steps_per_round(knobs)

    @classmethod
    def steps_per_round(cls, knobs: dict) -> int:
        return int(knobs.get("inner_steps", 1))
