"""The `avgbench` command: train.py's main with Hydra pointed at the conf/ beside the installed modules.

Run as a console script, Hydra would look for the config as a Python package (`pkg://conf`); conf/ is a folder of
YAML files, so its path is given explicitly (a --config-path of the user's, later on the line, still wins)."""
import sys

import train
from launchers.config import CONF_DIR


def main() -> None:
    sys.argv[1:1] = [f"--config-path={CONF_DIR}"]
    train.main()


if __name__ == "__main__":
    main()
