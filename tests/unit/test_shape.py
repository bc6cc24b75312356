"""Shapes that fit: the multi-peer strategies default to the most peers (2 to 4) whose CPUs fit the machine's
usable cores; an explicit peers wins; a run says where its peers came from, and when it oversubscribes.

Unit tier: composed configs with the core count injected. Integration: a short run's and a multirun's first
output line, its summary's shape, and the cores its peers pinned."""
import socket

import pytest
import yaml

from helpers import compose_config, strategy_names
from launchers import shape as shape_module
from launchers.config import CONF_DIR, strategy_class
from launchers.shape import peers_from_default, shape_lines, shape_of


def peers_default(name: str) -> str:
    """`peers` as conf/strategy/NAME.yaml writes it, unresolved."""
    return str(yaml.safe_load((CONF_DIR / "strategy" / f"{name}.yaml").read_text())["peers"])


# the strategies whose peers default to the most that fit, with no other processes beside them (ps has servers)
MULTI_PEER = [name for name in strategy_names() if peers_default(name) == "${fit_peers:${peer_cpus}}"]


@pytest.fixture
def cores(monkeypatch):
    """Inject the machine's usable core count."""
    def set_cores(count: int) -> None:
        monkeypatch.setattr(shape_module, "usable_cores", lambda: count)
    return set_cores


@pytest.mark.timeout(60)
@pytest.mark.parametrize("strategy", MULTI_PEER)
@pytest.mark.parametrize("count, peer_cpus, expected", [(2, 1, 2), (3, 1, 3), (8, 1, 4), (64, 1, 4),
                                                        (8, 2, 4), (6, 2, 3), (4, 2, 2), (2, 2, 2)])
def test_default_peers_are_the_most_that_fit(cores, strategy, count, peer_cpus, expected):
    cores(count)
    cfg = compose_config(f"strategy={strategy}", f"peer_cpus={peer_cpus}")
    assert peers_from_default(cfg)
    assert cfg.peers == expected


@pytest.mark.timeout(60)
@pytest.mark.parametrize("count, servers, expected", [(2, 1, 2), (4, 1, 3), (5, 1, 4), (5, 2, 3), (16, 1, 4)])
def test_ps_default_leaves_cores_for_its_servers(cores, count, servers, expected):
    cores(count)
    cfg = compose_config("strategy=ps", f"ps.servers={servers}")
    assert cfg.peers == expected


@pytest.mark.timeout(60)
def test_explicit_peers_win_and_single_stays_one_process(cores):
    cores(16)
    cfg = compose_config("strategy=stepwise", "peers=3")
    assert cfg.peers == 3 and not peers_from_default(cfg)
    assert compose_config("strategy=single").peers == 1
    assert compose_config("strategy=stepwise", "peers=8").peers == 8


def shape_for(*overrides: str) -> dict:
    cfg = compose_config(*overrides)
    return shape_of(cfg, strategy_class(cfg).launch_spec(cfg), peers_from_default(cfg))


@pytest.mark.timeout(60)
def test_shape_lines_name_the_default_and_the_oversubscription(cores):
    cores(2)
    fitting = shape_for("strategy=ring")
    assert fitting == {"peers": 2, "peer_cpus": 1, "processes": 2, "cpus_asked": 2, "cores": 2,
                       "oversubscription": 1.0, "fits": True, "peers_default": True, "host": socket.gethostname(),
                       "node_rank": 0, "nnodes": 1}
    assert shape_lines(fitting) == ["avgbench: peers=2 (default: the most peers, 2 to 4, whose 1 CPU each fit this "
                                    "machine's 2 cores; ask for more with peers=N)"]
    explicit = shape_for("strategy=stepwise", "peers=4")
    assert explicit["cpus_asked"] == 4 and explicit["oversubscription"] == 2 and not explicit["fits"]
    assert shape_lines(explicit) == ["avgbench: oversubscribed 2x: 4 processes ask 4 CPUs of this machine's 2 cores, "
                                     "so they share cores (the report's verdict says so)"]
    server = shape_for("strategy=ps")  # 2 workers at least, beside 1 server: 3 processes on 2 cores
    assert server["processes"] == 3 and server["oversubscription"] == 1.5
    assert "beside the strategy's 1 other process" in shape_lines(server)[0]
    assert shape_lines(server)[1].startswith("avgbench: oversubscribed 1.5x")
    baseline = shape_for("strategy=single", "peers=2")  # one process, 2 threads
    assert (baseline["processes"], baseline["cpus_asked"], baseline["fits"]) == (1, 2, True)
    assert shape_lines(baseline) == []
