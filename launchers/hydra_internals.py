"""Every private Hydra and OmegaConf API the project relies on, in one place; tests/unit/test_private_apis.py fails
when an upgrade moves one."""
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.utils import get_args_parser  # noqa: F401  (Hydra's own command-line parser)

BASIC_SWEEPER = f"{BasicSweeper.__module__}.{BasicSweeper.__qualname__}"  # the _target_ Hydra's default sweeper has


def raw_value(cfg, key: str) -> str:
    """A config node's value as written, before interpolation (e.g. "${fit_peers:...}")."""
    return str(cfg._get_node(key)._value())
