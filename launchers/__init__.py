"""Launcher registry: the engine launcher a LaunchSpec names -> the class that runs it."""
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from job.registry import resolve
from metrics.recording.rundir import LaunchSpec, RunDir

if TYPE_CHECKING:
    from launchers.base import Launcher

LAUNCHERS = {"local": "launchers.local:LocalLauncher", "mpirun": "launchers.mpi:MpiLauncher",
             "horovodrun": "launchers.horovod:HorovodLauncher"}


def launch(cfg: DictConfig, run: RunDir, spec: LaunchSpec) -> "Launcher":
    return resolve(LAUNCHERS[spec.launcher])(cfg, run, spec)
