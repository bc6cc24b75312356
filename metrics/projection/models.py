"""A strategy's cost model, the class its config names (strategy.cost_model: package.module:Class): the one place
metrics imports a module by name, so that the projection and the report never import a strategy's runtime."""
import importlib
from pathlib import Path

import yaml

from metrics.projection.cost import CostModel

CONF_STRATEGIES = Path(__file__).resolve().parents[2] / "conf" / "strategy"


def cost_model(strategy: dict) -> type[CostModel]:
    """The cost model a config's `strategy` block names; a block that names none: the one conf/strategy/NAME.yaml
    names for its strategy."""
    path = strategy.get("cost_model")
    if not path and (conf := CONF_STRATEGIES / f"{strategy['name']}.yaml").exists():
        path = yaml.safe_load(conf.read_text())["strategy"].get("cost_model")
    if not path:
        raise ValueError(f"strategy {strategy['name']!r} names no cost model: set strategy.cost_model: "
                         "package.module:Class in its config")
    module, _, name = path.partition(":")
    try:
        model = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"strategy.cost_model={path}: cannot import it ({type(exc).__name__}: {exc})") from None
    if not (isinstance(model, type) and issubclass(model, CostModel)):
        raise ValueError(f"strategy.cost_model={path} is no subclass of metrics.projection.cost.CostModel")
    return model
