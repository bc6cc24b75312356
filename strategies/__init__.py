"""Averaging strategies: one module each, behind the interface in strategies/base.py.

conf/strategy/NAME.yaml names its class (strategy.target); backend modules import
their heavy packages (hivemind, horovod, mpi4py) lazily, so validation stays fast and
a missing backend gives a clear error.
"""
