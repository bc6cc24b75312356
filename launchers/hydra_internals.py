"""Every private Hydra and OmegaConf API the project relies on (tests/unit/test_private_apis.py). Hydra's core plugins
are imported only when called: a class taken before Hydra's plugin scan is not the one it instantiates."""
from typing import TYPE_CHECKING

from hydra._internal.utils import get_args_parser  # noqa: F401  (Hydra's own command-line parser)
from omegaconf import DictConfig

if TYPE_CHECKING:
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"  # Hydra's default sweeper, as _target_


def basic_sweeper() -> "type[BasicSweeper]":
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return BasicSweeper


def raw_value(cfg: DictConfig, key: str) -> str:
    """A config node's value as written, before interpolation (e.g. "${fit_peers:...}")."""
    node = cfg._get_node(key)
    assert node is not None, f"no key {key}"
    return str(node._value())
