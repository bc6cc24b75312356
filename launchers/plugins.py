"""Where strategies' configs (strategy/NAME.yaml) are found: conf/, installed packages' entry points, search paths."""
import importlib.util
from importlib.metadata import entry_points
from pathlib import Path
from typing import Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser

from job.errors import ConfigError

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
ENTRY_POINT_GROUP = "avgbench.strategies"


def entry_point_folders() -> list[Path]:
    """The installed packages' strategy folders; ConfigError where one has no strategy/NAME.yaml."""
    folders = []
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            spec = importlib.util.find_spec(entry.module)
        except ImportError:
            spec = None
        folder = Path(spec.origin).parent if spec and spec.origin else None  # None: no such module, or no file
        if folder is None or not (folder / "strategy" / f"{entry.name}.yaml").exists():
            raise ConfigError(f"{ENTRY_POINT_GROUP} entry point {entry.name} = {entry.value}: no strategy/"
                              f"{entry.name}.yaml in the folder of module {entry.module}")
        folders.append(folder)
    return folders


def strategy_configs(overrides: Sequence[str] = ()) -> dict[str, Path]:
    """Every strategy's config by name: conf/'s, installed packages', then search-path folders' (first wins)."""
    searched = [o.value() for o in OverridesParser.create().parse_overrides(list(overrides))
                if o.key_or_group == "hydra.searchpath"]
    folders = [CONF_DIR, *entry_point_folders(),
               *(Path(p.removeprefix("file://")) for paths in searched if isinstance(paths, list)
                 for p in paths if p.startswith("file://"))]
    found = {path.stem: path for folder in reversed(folders) for path in (folder / "strategy").glob("*.yaml")}
    return dict(sorted(found.items()))
