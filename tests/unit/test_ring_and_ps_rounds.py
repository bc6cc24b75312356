"""The stepwise ring round and the parameter server's exchange, run directly over real gloo processes
(integration tier; tests/unit/test_accounting.py runs the same code between threads in the unit tier).
Stepwise and ps knob validation is in the unit tier here."""

import pytest

from helpers import compose_config
from job.errors import ConfigError
from launchers.config import validate


@pytest.mark.parametrize("overrides, message", [
    (["strategy=ps", "ps.servers=0"], "ps.servers must be >= 1"),
    (["strategy=ps", "ps.mode=lazy"], "ps.mode must be one of"),
    (["strategy=stepwise", "stepwise.average=loss"], "stepwise.average must be one of"),
    (["strategy=stepwise", "stepwise.chunks=0"], "stepwise.chunks must be >= 1"),
    (["strategy=stepwise", "transport=tcp"], "transport must be one of"),
    (["strategy=ps", "transport=mpi", "launch.nnodes=2", "launch.master_port=2345"], "launch.hostfile"),
])
def test_bad_knobs_are_rejected_before_launch(overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate(compose_config(*overrides))
