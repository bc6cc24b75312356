"""localsgd's cost model: one ring all-reduce of the parameters every localsgd.every steps, after a warm-up of one
all-reduce of the gradients per step (strategies/localsgd.py)."""
from metrics.projection.cost import PeriodicRingAllReduceCost


class LocalSGDCost(PeriodicRingAllReduceCost):
    @classmethod
    def warmup_steps(cls, knobs: dict) -> int:
        """The synchronous warm-up and the first model average after it, at step warmup_steps + every."""
        return int(knobs.get("warmup_steps", 0)) + cls.steps_per_round(knobs)

    @classmethod
    def steps_per_round(cls, knobs: dict) -> int:
        return int(knobs.get("every", 1))
