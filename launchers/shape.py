"""A run's shape on this machine (the CPUs its processes ask for, the cores there are) and fit_peers' default peers."""
import socket
from typing import Any

from omegaconf import DictConfig, OmegaConf

from job.process import usable_cores
from launchers.hydra_internals import raw_value
from metrics.recording.rundir import LaunchSpec

DEFAULT_PEERS_MIN, DEFAULT_PEERS_MAX = 2, 4


def fit_peers(peer_cpus: int | str, other_processes: int | str = 0) -> int:
    """The most peers (DEFAULT_PEERS_MIN..MAX) whose peer_cpus, beside other_processes as large, fit the cores."""
    fitting = usable_cores() // int(peer_cpus) - int(other_processes)
    return max(DEFAULT_PEERS_MIN, min(DEFAULT_PEERS_MAX, fitting))


def peers_from_default(cfg: DictConfig) -> bool:
    """True when `peers` is still the strategy's fit_peers default (the user did not set it)."""
    return OmegaConf.is_interpolation(cfg, "peers") and "fit_peers" in raw_value(cfg, "peers")


def shape_of(cfg: DictConfig, spec: LaunchSpec, peers_default: bool) -> dict[str, Any]:
    """summary.json `shape` (method in metrics.summary.build.METHODS['shape'])."""
    cores = usable_cores()
    processes = spec.processes // int(cfg.launch.nnodes)  # those on this host
    dilation = float(OmegaConf.select(cfg, "emulate.dilation", default=1) or 1)
    asked = processes * spec.threads / dilation
    return {"peers": int(cfg.peers), "peer_cpus": int(cfg.peer_cpus), "processes": processes,
            "cpus_asked": asked, "cores": cores, "oversubscription": asked / cores, "fits": asked <= cores,
            "peers_default": peers_default, "host": socket.gethostname(), "node_rank": int(cfg.launch.node_rank),
            "nnodes": int(cfg.launch.nnodes)}


def shape_lines(shape: dict[str, Any]) -> list[str]:
    """What the run prints first: where peers came from the default, and any oversubscription."""
    lines = []
    if shape["peers_default"]:
        cpus = shape["peer_cpus"]
        others = shape["processes"] - shape["peers"]
        beside = f" beside the strategy's {others} other process{'es' if others > 1 else ''}" if others else ""
        lines.append(f"avgbench: peers={shape['peers']} (default: the most peers, {DEFAULT_PEERS_MIN} to "
                     f"{DEFAULT_PEERS_MAX}, whose {cpus} CPU{'s' if cpus > 1 else ''} each fit this machine's "
                     f"{shape['cores']} cores{beside}; ask for more with peers=N)")
    if not shape["fits"]:
        lines.append(f"avgbench: oversubscribed {shape['oversubscription']:.2g}x: {shape['processes']} processes ask "
                     f"{shape['cpus_asked']:g} CPUs of this machine's {shape['cores']} cores, so they share cores "
                     "(the report's verdict says so)")
    return lines
