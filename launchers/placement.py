"""Where each rank lives on the network: this host (HostPlacement) or emulated host r (NamespacePlacement)."""
import os
import sys
from pathlib import Path

from omegaconf import DictConfig

from job.process import core_slot
from metrics.recording.rundir import RunDir
from netemu import INTERFACE, Fabric, FabricError, Host
from netemu.agent import NETWORK_ENV
from netemu.checks import rank_bandwidths
from netemu.goodput import LinkMeter

SHIMS = Path(__file__).resolve().parent.parent / "netemu" / "shims"


class PlacementError(RuntimeError):
    """The ranks' hosts could not be set up; the run fails with this message."""


class HostPlacement:
    def start(self, env: dict[str, str]) -> None:
        """Create what the ranks need (env: the run's base environment)."""

    def close(self) -> None:
        """Remove it again; called in the launcher's finally path."""

    def wrap(self, rank: int, command: list[str]) -> list[str]:
        return command

    def env(self, rank: int) -> dict[str, str]:
        return {}

    def address(self, rank: int) -> str | None:
        """The address other ranks reach `rank` at; None: launch.master_addr decides."""
        return None

    def head(self, command: list[str]) -> list[str]:
        return self.wrap(0, command)

    def head_env(self) -> dict[str, str]:
        return {}

    def mpirun_args(self) -> list[str]:
        return []

    def horovodrun_args(self) -> list[str]:
        """horovodrun arguments that place rank r on host r (empty: the launcher's own hosts)."""
        return []

    def horovodrun_env(self) -> dict[str, str]:
        return {}


class NamespacePlacement(HostPlacement):
    def __init__(self, cfg: DictConfig, run: RunDir, nprocs: int, cores_per_host: int):
        self.run, self.nprocs, self.cores_per_host = run, nprocs, cores_per_host
        self.bandwidths = rank_bandwidths(cfg.network, nprocs)
        self.latency_ms = float(cfg.network.get("latency_ms") or 0)
        self.mtu = int(cfg.network.mtu)
        self.fabric: Fabric | None = None
        self.meter: LinkMeter | None = None

    def start(self, env: dict[str, str]) -> None:
        cores = [core_slot(i, self.cores_per_host, os.sched_getaffinity(0)) for i in range(self.nprocs)]
        self.fabric = Fabric(self.nprocs, self.bandwidths, self.latency_ms, env=env, host_cores=cores, mtu=self.mtu)
        try:
            self.fabric.start()
        except FabricError as exc:
            raise PlacementError(f"emulated network: {exc}") from exc
        self.fabric.write(self.run.network)
        self.meter = LinkMeter(self.fabric, self.run.link_meter).start()

    def close(self) -> None:
        if self.meter is not None:
            self.meter.stop()
        if self.fabric is not None:
            self.fabric.close()

    @property
    def hosts(self) -> list[Host]:
        assert self.fabric is not None, "start() first"
        return self.fabric.hosts

    def wrap(self, rank: int, command: list[str]) -> list[str]:
        return [*self.hosts[rank].enter, *command]

    def env(self, rank: int) -> dict[str, str]:
        return {
            "GLOO_SOCKET_IFNAME": INTERFACE,   # gloo (torch.distributed, Horovod) binds this interface
            "TP_SOCKET_IFNAME": INTERFACE,     # tensorpipe, if used
            "AVGBENCH_PEER_ADDR": self.hosts[rank].addr,  # a strategy that opens its own sockets binds this
        } | self.head_env()

    def address(self, rank: int) -> str:
        return self.hosts[rank].addr

    def head_env(self) -> dict[str, str]:
        return {NETWORK_ENV: str(self.run.network), "AVGBENCH_PYTHON": sys.executable}

    def mpirun_args(self) -> list[str]:
        self.run.hostfile.write_text("".join(f"{h.addr} slots=1\n" for h in self.hosts))  # a slot per host, by rank
        return ["--hostfile", str(self.run.hostfile), "--map-by", "node", "--mca", "plm_rsh_agent",
                f"{sys.executable} -m netemu.agent", "--mca", "btl", "self,tcp",
                "--mca", "btl_tcp_if_include", INTERFACE, "--mca", "oob_tcp_if_include", INTERFACE]

    def horovodrun_args(self) -> list[str]:
        hosts = ",".join(f"{h.addr}:1" for h in self.hosts)
        return ["-H", hosts, "--network-interfaces", INTERFACE]

    def horovodrun_env(self) -> dict[str, str]:
        """horovodrun reaches hosts with `ssh`: the shim in netemu/shims comes first in PATH."""
        return self.head_env() | {"PATH": os.pathsep.join([str(SHIMS), os.environ.get("PATH", "")])}


def make_placement(cfg: DictConfig, run: RunDir, nprocs: int, threads: int) -> HostPlacement:
    """threads: CPUs of each process (an emulated host's own cores)."""
    if cfg.network.name == "emulated":
        return NamespacePlacement(cfg, run, nprocs, threads)
    return HostPlacement()
