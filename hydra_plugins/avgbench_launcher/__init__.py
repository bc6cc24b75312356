"""Hydra takes launchers only from its `hydra_plugins` namespace: this names avgbench's SLURM launcher there
(conf/hydra/launcher/slurm.yaml). The launcher itself is launchers/slurm.py."""
from launchers.slurm import SlurmLauncher as _SlurmLauncher


class SlurmLauncher(_SlurmLauncher):
    pass
