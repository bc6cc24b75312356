"""Hydra's search path, with the config folders of the strategies installed packages declare as entry points
(launchers/plugins.py)."""
from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

from job.errors import ConfigError
from launchers.plugins import entry_point_folders


class InstalledStrategies(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        try:
            folders = entry_point_folders()
        except ConfigError:
            return  # train.py has said which entry point is wrong, before Hydra started
        for folder in folders:
            search_path.append("avgbench-strategies", f"file://{folder}")
