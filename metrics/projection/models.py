"""Every strategy's cost model, by the strategy's name (config strategy.name): the classes beside the strategies
(strategies/<name>_cost.py), imported here by name so that the projection never imports a strategy's runtime."""
from metrics.projection.cost import CostModel
from strategies.allreduce_cost import AllReduceCost
from strategies.diloco_cost import DiLoCoCost
from strategies.hivemind_cost import HivemindCost
from strategies.localsgd_cost import LocalSGDCost
from strategies.ps_cost import ParameterServerCost
from strategies.ring_cost import RingCost
from strategies.single_cost import SingleCost
from strategies.stepwise_cost import StepwiseCost

COST_MODELS: dict[str, type[CostModel]] = {
    "allreduce": AllReduceCost, "diloco": DiLoCoCost, "hivemind": HivemindCost, "localsgd": LocalSGDCost,
    "ps": ParameterServerCost, "ring": RingCost, "single": SingleCost, "stepwise": StepwiseCost,
}


def cost_model(strategy: str) -> type[CostModel]:
    """The cost model of the strategy named `strategy`."""
    if strategy not in COST_MODELS:
        raise ValueError(f"strategy {strategy!r} has no cost model here: add its strategies/{strategy}_cost.py to "
                         "metrics/projection/models.py")
    return COST_MODELS[strategy]
