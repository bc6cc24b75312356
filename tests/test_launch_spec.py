"""Each strategy's LaunchSpec from a composed config: how many processes, their roles, threads,
batch and launcher (unit tier: nothing is launched)."""
import pytest

from helpers import compose_config
from job.contract import SERVER, WORKER, LaunchSpec
from launchers.config import strategy_class
from metrics.rundir import RunDir

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


@pytest.mark.parametrize("strategy", ["allreduce", "ps", "stepwise"])
def test_transport_mpi_is_started_by_mpirun(strategy):
    assert spec_for(f"strategy={strategy}", "peers=2", "transport=mpi").launcher == "mpirun"
    assert spec_for(f"strategy={strategy}", "peers=2", "transport=gloo").launcher == "local"


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
    for strategy in ("single", "allreduce", "ps", "stepwise", "ring"):
        assert not spec_for(f"strategy={strategy}", "peers=2").tolerate_peer_loss, strategy


def test_launch_spec_round_trips_through_the_run_directory(tmp_path):
    spec = spec_for("strategy=ring", "peers=2", "ring.controller=mpi")
    run = RunDir(tmp_path / "run")
    spec.save(run)
    assert run.launch_spec == tmp_path / "run" / ".avgbench" / "launch.json"
    assert LaunchSpec.load(run) == spec
