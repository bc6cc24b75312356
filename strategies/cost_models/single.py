"""single's cost model: compute only (strategies/single.py)."""
from metrics.projection.cost import Cost, CostModel


class SingleCost(CostModel):
    communicates = False

    @classmethod
    def step_time(cls, m: Cost) -> float:
        """compute: no communication.

        Projected to N peers, it is N independent copies of the measured process: the ceiling of
        linear scaling that the other strategies are compared with.
        """
        return m.compute
