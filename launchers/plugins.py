"""Where strategies come from: conf/strategy/NAME.yaml; a folder of the user's on Hydra's search path
(hydra.searchpath=[file://DIR], its config DIR/strategy/NAME.yaml, its module importable); an installed package's
entry point of the group avgbench.strategies (NAME = package.module, the strategy's module, its config
strategy/NAME.yaml in that module's folder; hydra_plugins/avgbench_strategies puts the folder on Hydra's search path).
A strategy's config names its class (strategy.target) and its cost model (strategy.cost_model)."""
import importlib.util
from importlib.metadata import entry_points
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser

from job.errors import ConfigError

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
ENTRY_POINT_GROUP = "avgbench.strategies"


def entry_point_folders() -> list[Path]:
    """The config folders of the installed packages' strategies; ConfigError where one has no strategy/NAME.yaml."""
    folders = []
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            spec = importlib.util.find_spec(entry.module)
        except ImportError:
            spec = None
        folder = Path(spec.origin).parent if spec and spec.origin else None
        if folder is None or not (folder / "strategy" / f"{entry.name}.yaml").exists():
            raise ConfigError(f"{ENTRY_POINT_GROUP} entry point {entry.name} = {entry.value}: no strategy/"
                              f"{entry.name}.yaml in the folder of module {entry.module}")
        folders.append(folder)
    return folders


def searchpath_folders(overrides: list[str]) -> list[Path]:
    """The file:// folders a command line adds to Hydra's search path (hydra.searchpath=[file://DIR, ...])."""
    for override in OverridesParser.create().parse_overrides(overrides):
        if override.key_or_group == "hydra.searchpath":
            return [Path(p.removeprefix("file://")) for p in override.value() if p.startswith("file://")]
    return []


def strategy_configs(overrides: list[str] = ()) -> dict[str, Path]:
    """Every strategy's config file, by name: conf/strategy/, the installed packages', then the search path's of
    `overrides` (the first of a name wins, as in Hydra)."""
    found = {}
    for folder in [CONF_DIR, *entry_point_folders(), *searchpath_folders(list(overrides))]:
        for path in sorted((folder / "strategy").glob("*.yaml")):
            found.setdefault(path.stem, path)
    return found
