"""Launcher registry: the engine launcher a LaunchSpec names -> the class that runs it."""
from job.registry import resolve

LAUNCHERS = {"local": "launchers.local:LocalLauncher", "mpirun": "launchers.mpi:MpiLauncher",
             "horovodrun": "launchers.horovod:HorovodLauncher"}


def launch(cfg, run, spec):
    return resolve(LAUNCHERS[spec.launcher])(cfg, run, spec)
