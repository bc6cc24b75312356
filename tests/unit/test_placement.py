"""Where ranks run (unit tier): the emulated network's placement turns its hosts into the
arguments and environment of mpirun, horovodrun and each rank. No namespace is created:
the fabric's hosts are records built here."""
import os
import sys
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from launchers.placement import SHIMS, HostPlacement, NamespacePlacement, make_placement
from metrics.recording.rundir import RunDir
from netemu import Host

pytestmark = pytest.mark.timeout(30)


def host(index: int, rate) -> Host:
    addr = f"10.213.7.{index + 1}"
    return Host(index=index, netns=f"h{index}", addr=addr, bandwidth_mbit=rate, latency_ms=0.0, mtu=9000,
                netns_inode=4000 + index, enter=["nsenter", f"--net=/run/netns/h{index}", "--"],
                tmpdir=f"/tmp/netemu-test-h{index}")


@pytest.fixture
def placement(tmp_path):
    cfg = OmegaConf.create({"network": {"name": "emulated", "bandwidth_mbit": 100, "per_peer": [None, 20, None],
                                        "mtu": 9000}})
    run = RunDir(tmp_path / "run")
    run.private.mkdir(parents=True)
    placed = make_placement(cfg, run, 3, 1)
    assert isinstance(placed, NamespacePlacement)
    placed.fabric = SimpleNamespace(hosts=[host(i, rate) for i, rate in enumerate(placed.bandwidths)])
    return placed


def test_link_rates_per_rank(placement):
    assert placement.bandwidths == [100, 20, 100]


def test_each_rank_runs_inside_its_host(placement):
    assert placement.wrap(1, ["python", "-m", "job.worker"]) == [
        "nsenter", "--net=/run/netns/h1", "--", "python", "-m", "job.worker"]
    assert placement.head(["mpirun"]) == ["nsenter", "--net=/run/netns/h0", "--", "mpirun"]  # helpers on host 0
    assert [placement.address(r) for r in range(3)] == ["10.213.7.1", "10.213.7.2", "10.213.7.3"]


def test_rank_environment_binds_the_hosts_interface(placement):
    env = placement.env(2)
    assert env["GLOO_SOCKET_IFNAME"] == env["TP_SOCKET_IFNAME"] == "eth0"
    assert env["AVGBENCH_PEER_ADDR"] == "10.213.7.3"
    assert env["AVGBENCH_NETWORK"] == str(placement.run.network) and env["AVGBENCH_PYTHON"] == sys.executable


def test_mpirun_gets_a_hostfile_of_the_hosts_and_the_agent(placement):
    args = placement.mpirun_args()
    hostfile = args[args.index("--hostfile") + 1]
    assert hostfile == str(placement.run.hostfile)
    assert placement.run.hostfile.read_text() == "10.213.7.1 slots=1\n10.213.7.2 slots=1\n10.213.7.3 slots=1\n"
    assert args[args.index("--map-by") + 1] == "node"  # rank r on host r

    def mca(name):
        return args[args.index(name) + 1]

    assert mca("plm_rsh_agent") == f"{sys.executable} -m netemu.agent"
    assert mca("btl") == "self,tcp" and mca("btl_tcp_if_include") == "eth0" and mca("oob_tcp_if_include") == "eth0"


def test_horovodrun_gets_one_slot_per_host_and_the_ssh_shim(placement):
    assert placement.horovodrun_args() == ["-H", "10.213.7.1:1,10.213.7.2:1,10.213.7.3:1",
                                           "--network-interfaces", "eth0"]
    env = placement.horovodrun_env()
    assert env["PATH"].split(os.pathsep)[0] == str(SHIMS) and (SHIMS / "ssh").exists()
    assert env["AVGBENCH_NETWORK"] == str(placement.run.network)


def test_loopback_changes_nothing(tmp_path):
    placed = make_placement(OmegaConf.create({"network": {"name": "loopback"}}), RunDir(tmp_path), 2, 1)
    assert type(placed) is HostPlacement
    assert placed.wrap(1, ["x"]) == ["x"] and placed.env(1) == {} and placed.address(0) is None
    assert placed.mpirun_args() == [] and placed.horovodrun_args() == [] and placed.head(["y"]) == ["y"]
