"""Averaging strategies: one module each, behind the interface in strategies/base.py; backends (hivemind, horovod,
mpi4py) are imported lazily, so validation stays fast and a missing backend gives a clear error."""
