"""Puts installed packages' strategy folders (launchers/plugins.py) on Hydra's config search path."""
import contextlib

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

from job.errors import ConfigError
from launchers.plugins import entry_point_folders


class InstalledStrategies(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        with contextlib.suppress(ConfigError):  # train.py said which entry point is wrong before Hydra started
            for folder in entry_point_folders():
                search_path.append("avgbench-strategies", f"file://{folder}")
