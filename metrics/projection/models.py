"""Every strategy's cost model, by the strategy's name (config strategy.name): the classes beside the strategies
(strategies/cost_models/<name>.py), imported here by name so that the projection never imports a strategy's runtime."""
from metrics.projection.cost import CostModel
from strategies.cost_models.allreduce import AllReduceCost
from strategies.cost_models.diloco import DiLoCoCost
from strategies.cost_models.hivemind import HivemindCost
from strategies.cost_models.localsgd import LocalSGDCost
from strategies.cost_models.ps import ParameterServerCost
from strategies.cost_models.ring import RingCost
from strategies.cost_models.single import SingleCost
from strategies.cost_models.stepwise import StepwiseCost

COST_MODELS: dict[str, type[CostModel]] = {
    "allreduce": AllReduceCost, "diloco": DiLoCoCost, "hivemind": HivemindCost, "localsgd": LocalSGDCost,
    "ps": ParameterServerCost, "ring": RingCost, "single": SingleCost, "stepwise": StepwiseCost,
}


def cost_model(strategy: str) -> type[CostModel]:
    """The cost model of the strategy named `strategy`."""
    if strategy not in COST_MODELS:
        raise ValueError(f"strategy {strategy!r} has no cost model here: add its strategies/cost_models/{strategy}.py to "
                         "metrics/projection/models.py")
    return COST_MODELS[strategy]
