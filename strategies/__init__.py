"""Strategy registry: config name -> implementation, imported on first use.

Backend modules import their heavy packages (hivemind, horovod, mpi4py) lazily,
so validation stays fast and a missing backend gives a clear error.
"""
from job.registry import resolve
from strategies.base import PeerContext, StepReport, Strategy

REGISTRY = {
    "single": "strategies.single:Single",
    "allreduce": "strategies.allreduce:AllReduce",
    "ps": "strategies.ps:ParameterServer",
    "stepwise": "strategies.stepwise:Stepwise",
    "ring": "strategies.ring:Ring",
    "hivemind": "strategies.hivemind:Hivemind",
}


def get_strategy(name: str) -> type[Strategy]:
    return resolve(REGISTRY[name])


__all__ = ["REGISTRY", "PeerContext", "StepReport", "Strategy", "get_strategy"]
