"""Launcher registry: the name a strategy asks for -> launcher class."""
from job.registry import resolve

LAUNCHERS = {
    "local": "launchers.local:LocalLauncher",
    "mpi": "launchers.mpi:MpiLauncher",
    "horovod": "launchers.horovod:HorovodLauncher",
}


def get_launcher(name: str):
    return resolve(LAUNCHERS[name])
