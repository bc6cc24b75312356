"""The `avgbench` command: train.py's main with --config-path set to the conf/ folder beside the installed modules
(a console script's Hydra would look for a package; a later --config-path of the user's still wins)."""
import sys
from pathlib import Path

TOOL_FOLDER = str(Path(__file__).resolve().parent)  # the installed modules: train, metrics, job, ...


def main() -> None:
    sys.path.insert(0, TOOL_FOLDER)  # as `python train.py` puts its folder: before the user's PYTHONPATH folders
    import train
    from launchers.config import CONF_DIR

    sys.argv[1:1] = [f"--config-path={CONF_DIR}"]
    train.main()


if __name__ == "__main__":
    main()
