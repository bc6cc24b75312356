"""Every private Hydra and OmegaConf API the project relies on, in one place; tests/unit/test_private_apis.py fails
when an upgrade moves one. Nothing here imports Hydra's core plugins at import time: Hydra loads them anew when it
scans for plugins, and a class taken before that scan is not the one Hydra instantiates."""
from hydra._internal.utils import get_args_parser  # noqa: F401  (Hydra's own command-line parser)

BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"  # Hydra's default sweeper, as _target_


def basic_sweeper():
    """Hydra's BasicSweeper class, for a sweeper that extends it (imported when called)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return BasicSweeper


def raw_value(cfg, key: str) -> str:
    """A config node's value as written, before interpolation (e.g. "${fit_peers:...}")."""
    return str(cfg._get_node(key)._value())
