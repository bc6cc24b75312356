"""strategy=ring: Horovod's knobs and launch (unit tier); real Horovod under horovodrun, gloo and MPI
controllers, on the tiny model and digits (integration tier). Byte expectations use the tiny model's
parameters counted by hand (helpers.TINY_DIGITS_PARAMS = 9978)."""
import os
import sys

import pytest

from helpers import compose_config
from job.errors import BackendUnavailable, ConfigError
from launchers.config import validate
from strategies.ring import Ring


def test_mpi_controller_without_mpirun_is_a_backend_error(monkeypatch):
    """A real missing piece, not a mock: a PATH without Open MPI's mpirun."""
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))
    with pytest.raises(BackendUnavailable, match="mpirun on PATH"):
        Ring.check_available(compose_config("strategy=ring", "ring.controller=mpi"))


@pytest.mark.parametrize("overrides, message", [
    (["ring.controller=nccl"], "ring.controller must be one of gloo, mpi"),
    (["ring.compression=int8"], "ring.compression must be one of none, fp16"),
    (["ring.backward_passes_per_step=0"], "ring.backward_passes_per_step must be >= 1"),
    (["peers=4", "ring.hosts=localhost:2"], "has 2 slots, peers=4"),
    (["peers=4", "ring.hosts=[node1:2,node2:2]"], "set ring.network_interface"),
    (["peers=4", "ring.hosts='localhost:2,127.0.0.1:1'"], "has 3 slots, peers=4"),
    (["ring.hosts=localhost"], "ring.hosts must look like"),
])
def test_bad_ring_knobs(overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate(compose_config("strategy=ring", *overrides))


def test_horovods_cycle_time_is_set_not_left_to_its_default():
    """link_s starts at the first gradient handed over, within one cycle of Horovod sending it (ring.py
    _gradient_ready): the cycle is ours, 1 ms unless asked otherwise."""
    args = Ring.launch_spec(compose_config("strategy=ring", "peers=2")).launcher_args
    assert args[args.index("--cycle-time-ms") + 1] == "1.0"
    args = Ring.launch_spec(compose_config("strategy=ring", "peers=2", "ring.cycle_time_ms=5")).launcher_args
    assert args[args.index("--cycle-time-ms") + 1] == "5.0"
