"""single's cost model: compute only (strategies/single.py)."""
from metrics.projection.cost import Cost, CostModel


class SingleCost(CostModel):
    communicates = False
    models_nodes = True  # compute only, on any cluster's shape

    @classmethod
    def step_time(cls, m: Cost) -> float:
        """compute: no communication."""
        return m.compute
