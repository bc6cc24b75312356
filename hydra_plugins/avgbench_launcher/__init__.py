"""launchers/slurm.py's launcher where Hydra looks for launchers (conf/hydra/launcher/slurm.yaml)."""
from launchers.slurm import SlurmLauncher as _SlurmLauncher


class SlurmLauncher(_SlurmLauncher):
    pass
