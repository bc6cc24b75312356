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


@pytest.mark.timeout(60)
def test_ps_server_builds_its_shard_before_the_rendezvous(tmp_path, monkeypatch):
    """The workers wait in the rendezvous: the server has its model and optimizer by the time it joins them."""
    import job.optim
    import strategies.ps as ps
    from job.contract import PeerContext
    from metrics.recording.rundir import SERVER, WORKER, LaunchSpec, RunDir

    built = []
    for module, name in ((ps, "build_server_model"), (job.optim, "build_optimizer")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, real=real, name=name: built.append(name) or real(*a))

    class Joined(Exception):
        pass

    def connect():
        raise Joined(list(built))

    cfg = compose_config("strategy=ps", "peers=1", "model=tiny")
    spec = LaunchSpec(roles=[WORKER, SERVER], threads=1, batch_size=32, effective_batch=32)
    server = ps.ParameterServer(cfg, PeerContext(1, 2, 1, 2, "127.0.0.1", 0, RunDir(tmp_path)), spec)
    server.connect = connect
    with pytest.raises(Joined) as joined:
        server.serve()
    assert joined.value.args[0] == ["build_server_model", "build_optimizer"]
