"""The `avgbench` command: train.py's main with --config-path set to the conf/ folder beside the installed modules
(a console script's Hydra would look for a package; a later --config-path of the user's still wins)."""
import sys

import train
from launchers.config import CONF_DIR


def main() -> None:
    sys.argv[1:1] = [f"--config-path={CONF_DIR}"]
    train.main()


if __name__ == "__main__":
    main()
