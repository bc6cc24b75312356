"""Each strategy's LaunchSpec from a composed config: how many processes, their roles, threads,
batch and launcher (unit tier: nothing is launched)."""
import pytest

from helpers import compose_config, strategy_names, strategy_of
from job.errors import ConfigError
from launchers.config import strategy_class, validate
from metrics.recording.rundir import SERVER, WORKER, LaunchSpec, RunDir
from strategies.base import Strategy
from strategies.transport import TransportStrategy

pytestmark = pytest.mark.timeout(60)


def spec_for(*overrides: str) -> LaunchSpec:
    cfg = compose_config(*overrides)
    return strategy_class(cfg).launch_spec(cfg)


def test_single_with_peers_is_one_process_with_all_their_threads_and_batch():
    spec = spec_for("strategy=single", "peers=4", "peer_cpus=2", "batch_size=32")
    assert spec.roles == [WORKER] and spec.processes == 1 and spec.workers == 1
    assert spec.threads == 8 and spec.batch_size == 128 and spec.effective_batch == 128
    assert spec.launcher == "local" and not spec.tolerate_peer_loss


def test_single_alone_is_the_one_peer_run():
    spec = spec_for("strategy=single")
    assert (spec.processes, spec.threads, spec.batch_size) == (1, 1, 32)


def test_allreduce_is_one_process_per_peer():
    spec = spec_for("strategy=allreduce", "peers=3", "peer_cpus=2")
    assert spec.roles == [WORKER] * 3 and spec.threads == 2 and spec.batch_size == 32
    assert spec.effective_batch == 96 and spec.launcher == "local"


def test_ps_servers_follow_the_workers():
    spec = spec_for("strategy=ps", "peers=3", "ps.servers=2")
    assert spec.roles == [WORKER, WORKER, WORKER, SERVER, SERVER]
    assert (spec.processes, spec.workers) == (5, 3) and spec.launcher == "local"


@pytest.mark.parametrize("strategy", strategy_names())
def test_every_strategy_names_its_class_and_launches_each_peer_as_a_worker(strategy):
    """The registry entry is consistent: NAME.yaml names NAME and a Strategy; its launch spec has a worker per
    peer with the peer's threads (servers come on top), its declared counters are names and its declared
    overrides compose."""
    cfg = compose_config(f"strategy={strategy}", "peers=3", "peer_cpus=2")
    cls = strategy_class(cfg)
    assert cfg.strategy.name == strategy and issubclass(cls, Strategy) and cls is strategy_of(strategy)
    spec = cls.launch_spec(cfg)
    assert spec.workers == (1 if cls.is_baseline else 3)
    assert spec.threads == (6 if cls.is_baseline else 2) and spec.effective_batch >= 1
    assert all(isinstance(k, str) for k in (*cls.summed_counters, *cls.failure_counters, *cls.quick))
    for benchmark in cls.benchmark_overrides.values():
        compose_config(f"strategy={strategy}", *cls.quick, *benchmark)
    assert not set(cls.knobs_elsewhere) & set(cfg.get(strategy) or {})  # a knob set elsewhere is no knob of its own


TRANSPORT_STRATEGIES = [s for s in strategy_names() if issubclass(strategy_of(s), TransportStrategy)]


@pytest.mark.parametrize("strategy", TRANSPORT_STRATEGIES)
def test_transport_mpi_is_started_by_mpirun_or_refused(strategy):
    """A strategy on the top-level transport runs MPI ranks under mpirun, or refuses transport=mpi before launch."""
    assert spec_for(f"strategy={strategy}", "peers=2", "transport=gloo").launcher == "local"
    try:
        validate(compose_config(f"strategy={strategy}", "peers=2", "transport=mpi"))
    except ConfigError as exc:
        assert "transport=mpi" in str(exc)
        return
    assert spec_for(f"strategy={strategy}", "peers=2", "transport=mpi").launcher == "mpirun"


def test_ring_mpi_controller_runs_horovodrun_with_open_mpis_ring():
    spec = spec_for("strategy=ring", "peers=2", "ring.controller=mpi")
    assert spec.launcher == "horovodrun" and spec.processes == 2
    args = spec.launcher_args
    assert "--mpi" in args and "--gloo" not in args
    mpi_args = args[args.index("--mpi-args") + 1].split()
    for name, value in (("coll_tuned_use_dynamic_rules", "1"), ("coll_tuned_allreduce_algorithm", "4")):
        assert mpi_args[mpi_args.index(name) + 1] == value and mpi_args[mpi_args.index(name) - 1] == "-mca"
    assert spec.host_args == ["-H", "localhost:2", "--network-interface", "lo"]


def test_ring_mpi_ranks_yield_their_core_when_they_outnumber_this_machines_cores(monkeypatch):
    """Emulated hosts are namespaces of this machine: 8 busy-polling ranks on 2 cores stretched each ring step."""
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})

    def mpi_args(*overrides):
        args = spec_for(*overrides).launcher_args
        return args[args.index("--mpi-args") + 1]

    for network in ("loopback", "emulated"):
        assert "-mca mpi_yield_when_idle 1" in mpi_args("strategy=ring", "peers=4", "ring.controller=mpi",
                                                         f"network={network}")
    assert "mpi_yield_when_idle" not in mpi_args("strategy=ring", "peers=2", "ring.controller=mpi")
    assert "mpi_yield_when_idle" not in mpi_args("strategy=ring", "peers=4", "ring.controller=mpi",
                                                 "ring.hosts='a:2,b:2'", "ring.network_interface=eth1")


def test_ring_gloo_controller_and_its_deadlines():
    spec = spec_for("strategy=ring", "peers=3", "ring.controller=gloo", "timeouts.collective_s=30",
                    "timeouts.startup_s=90")
    args = spec.launcher_args
    assert "--gloo" in args and "--mpi-args" not in args
    assert args[args.index("--start-timeout") + 1] == "90"
    assert args[args.index("--gloo-timeout-seconds") + 1] == "90"  # also bounds the rendezvous
    assert spec.host_args[:2] == ["-H", "localhost:3"]


def test_ring_hosts_are_passed_to_horovodrun():
    spec = spec_for("strategy=ring", "peers=4", "ring.hosts='a:2,b:2'", "ring.network_interface=eth1")
    assert spec.host_args == ["-H", "a:2,b:2", "--network-interface", "eth1"]


def test_hivemind_tolerates_peer_loss_and_the_others_do_not():
    assert spec_for("strategy=hivemind", "peers=3").tolerate_peer_loss
    for strategy in set(strategy_names()) - {"hivemind"}:
        assert not spec_for(f"strategy={strategy}", "peers=2").tolerate_peer_loss, strategy


def test_launch_spec_round_trips_through_the_run_directory(tmp_path):
    spec = spec_for("strategy=ring", "peers=2", "ring.controller=mpi")
    run = RunDir(tmp_path / "run")
    spec.save(run)
    assert run.launch_spec == tmp_path / "run" / ".avgbench" / "launch.json"
    assert LaunchSpec.load(run) == spec
