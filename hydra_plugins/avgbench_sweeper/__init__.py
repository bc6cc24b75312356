"""Hydra takes sweepers only from its `hydra_plugins` namespace: this names avgbench's block sweeper there
(conf/hydra/sweeper/blocks.yaml). The sweeper itself is launchers/sweeper.py."""
from launchers.sweeper import BlockSweeper as _BlockSweeper


class BlockSweeper(_BlockSweeper):
    pass
