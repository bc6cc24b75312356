"""launchers/sweeper.py's sweeper where Hydra looks for sweepers (conf/hydra/sweeper/blocks.yaml)."""
from launchers.sweeper import BlockSweeper as _BlockSweeper


class BlockSweeper(_BlockSweeper):
    pass
