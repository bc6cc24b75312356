"""Every private Hydra and OmegaConf API the project relies on (tests/unit/test_private_apis.py). Hydra's core plugins
are imported only when called: a class taken before Hydra's plugin scan is not the one it instantiates."""
from hydra._internal.utils import get_args_parser  # noqa: F401  (Hydra's own command-line parser)

BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"  # Hydra's default sweeper, as _target_


def basic_sweeper():
    """Hydra's BasicSweeper class, for a sweeper that extends it (imported when called)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return BasicSweeper


def raw_value(cfg, key: str) -> str:
    """A config node's value as written, before interpolation (e.g. "${fit_peers:...}")."""
    return str(cfg._get_node(key)._value())
