"""Checks run before launch: is the emulated network possible here, and are its knobs sane? Each probe runs in a
throwaway network namespace (freed as soon as the probe exits)."""
import shutil
import subprocess
from functools import cache

from omegaconf import DictConfig

from job.errors import BackendUnavailable, ConfigError
from netemu.fabric import MAX_HOSTS, privilege_hint, tbf_args, unprivileged

TOOLS = {"ip": "iproute2", "tc": "iproute2", "unshare": "util-linux", "nsenter": "util-linux", "taskset": "util-linux"}
NETWORK_MODES = ("loopback", "emulated", "auto")  # auto: emulated or loopback, chosen at launch (netemu/auto.py)


def probe(script: str) -> subprocess.CompletedProcess[str]:
    user = ["--user", "--map-root-user"] if unprivileged() else []
    return subprocess.run(["unshare", "--net", *user, "sh", "-c", script], capture_output=True, text=True,
                          timeout=30, stdin=subprocess.DEVNULL)


@cache
def emulation_problem() -> str | None:
    """Why namespaces, veth pairs and tbf cannot be set up here (None: they can)."""
    missing = sorted({pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None})
    if missing:
        return f"network=emulated needs {' and '.join(missing)} (apt-get install {' '.join(missing)})"
    done = probe("ip link add name a type veth peer name b && tc qdisc add dev a root " + " ".join(tbf_args(1)))
    if done.returncode:
        return f"network=emulated cannot create namespaces, veth pairs or tbf here: {done.stderr.strip()}" \
               f"{privilege_hint()}"
    return None


@cache
def has_netem() -> bool:
    return probe("ip link set lo up && tc qdisc add dev lo root netem delay 1ms").returncode == 0


def rank_bandwidths(network: DictConfig, processes: int) -> list[float | None]:
    """Bandwidth in Mbit/s of each rank's link: network.per_peer by rank, else network.bandwidth_mbit."""
    per_peer = list(network.get("per_peer") or [])
    default = network.get("bandwidth_mbit")
    return [per_peer[r] if r < len(per_peer) and per_peer[r] is not None else default for r in range(processes)]


def check_network_config(network: DictConfig, processes: int, nnodes: int) -> None:
    """ConfigError for knobs that do not fit the run (each value alone: launchers/schema.py), BackendUnavailable when
    the emulated network cannot be built here (network=auto is not probed: it falls back to loopback at launch)."""
    if network.name == "loopback":
        return
    if network.name == "auto":
        check_link_knobs(network, processes)
        return
    if nnodes > 1:
        raise ConfigError("network=emulated puts every peer on this machine; it cannot span launch.nnodes>1")
    if processes > MAX_HOSTS:
        raise ConfigError(f"network=emulated holds at most {MAX_HOSTS} processes, this run needs {processes}")
    latency = check_link_knobs(network, processes)
    if problem := emulation_problem():
        raise BackendUnavailable(problem)
    if latency and not has_netem():
        raise ConfigError(f"network.latency_ms={latency:g} needs the netem qdisc, which this kernel lacks "
                          "(CONFIG_NET_SCH_NETEM); use network.latency_ms=0 (bandwidth shaping works without it)")


def check_link_knobs(network: DictConfig, processes: int) -> float:
    """ConfigError for a per-peer list longer than the run; returns the latency in ms."""
    per_peer = list(network.get("per_peer") or [])
    if len(per_peer) > processes:
        raise ConfigError(f"network.per_peer has {len(per_peer)} entries but the run has {processes} processes")
    return float(network.get("latency_ms") or 0)
