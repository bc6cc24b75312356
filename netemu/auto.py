"""network=auto, the default: which link a run measures, decided before launch and said first: emulated per-host links
where this machine can build them, else the loopback, with a warning (one process: no link; several machines: their
own network).
"""
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from metrics.summary.link import ONLY_COMPUTE_DIFFERS
from netemu.checks import emulation_problem, rank_bandwidths
from netemu.fabric import MAX_HOSTS

AUTO = "auto"
ASK_FOR_A_LINK = ("network=emulated network.bandwidth_mbit=RATE asks for one (as root, or with unprivileged user "
                  "namespaces, and iproute2's ip and tc)")


@dataclass
class LinkChoice:
    """The link a run measures (RUN/.avgbench/link.json; summary.json `link` builds on it)."""

    asked: str                    # the network option asked for: auto, emulated, loopback
    kind: str                     # emulated | loopback | none (one process) | hosts (several machines' own network)
    scope: str                    # per-host (each process its own link) | shared (one loopback) | none
    processes: int                # on this machine
    rate_mbit_by_host: list[float | None]  # emulated: each host's rate per direction (None: unshaped)
    latency_ms: float             # emulated: added one-way latency
    mtu: int | None = None        # emulated: the links' frame size (bytes, the largest IP packet)
    reason: str | None = None     # why network=auto did not emulate links

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1))


def cheap_obstacle(processes: int, nnodes: int) -> str | None:
    """Why network=auto needs no emulated link, decided without starting a process (None: it wants one)."""
    if processes == 1:
        return "one process: nothing goes over a network"
    if nnodes > 1:
        return f"launch.nnodes={nnodes}: the machines talk over their own network"
    if processes > MAX_HOSTS:
        return f"{processes} processes: more than the {MAX_HOSTS} hosts an emulated network holds"
    return None


def choose_link(cfg: DictConfig, processes: int, nnodes: int = 1,
                problem: Callable[[], str | None] = emulation_problem) -> LinkChoice:
    """Resolve network=auto in cfg (network.name becomes emulated or loopback) and describe the link the run's
    `processes` (on all `nnodes` machines) get; `problem()` (why links cannot be emulated) only when auto wants one."""
    network = cfg.network
    processes //= nnodes  # those on this machine
    asked = network.name
    reason = None
    if asked == AUTO:
        reason = cheap_obstacle(processes, nnodes) or problem()
        network.name = "loopback" if reason else "emulated"
    if network.name == "emulated":
        rates = rank_bandwidths(network, processes)
        return LinkChoice(asked, "emulated", "per-host", processes, rates, float(network.get("latency_ms") or 0),
                          int(network.mtu))
    kind, scope = (("hosts", "per-host") if nnodes > 1 else ("none", "none") if processes == 1
                   else ("loopback", "shared"))
    return LinkChoice(asked, kind, scope, processes, [], 0.0, reason=reason)


def rates_text(rates: list[float | None]) -> str:
    if len(set(rates)) == 1:
        return "unshaped (the kernel's veth speed)" if rates[0] is None else f"{rates[0]:g} Mbit/s"
    return "Mbit/s by host " + ", ".join("unshaped" if r is None else f"{r:g}" for r in rates)


def link_line(choice: LinkChoice, shape: dict[str, Any]) -> str | None:
    """The run's first line: the link it measures (None for one process: it has none)."""
    if choice.kind == "none":
        return None
    if choice.kind == "hosts":
        return "avgbench: link: the machines' own network (launch.nnodes > 1), neither shaped nor checked by avgbench"
    if choice.kind == "loopback":
        warning, why = ("warning: ", f"network=auto could not emulate per-host links here ({choice.reason}); ") \
            if choice.asked == AUTO else ("", "")
        return (f"avgbench: {warning}link: this machine's loopback, shared by all {choice.processes} processes and "
                f"unshaped: {why}{ONLY_COMPUTE_DIFFERS}. {ASK_FOR_A_LINK}")
    latency = f", {choice.latency_ms:g} ms one-way latency" if choice.latency_ms else ", no added latency"
    hosts = f"{choice.processes} emulated hosts"
    if not shape["fits"]:
        hosts += (f" on {shape['cores']} cores: oversubscribed {shape['oversubscription']:.2g}x, the hosts share "
                  "cores, so a link may carry less than its rate (summary.json link.faithful)")
    how = "network=auto; network=loopback for this machine's loopback" if choice.asked == AUTO \
        else f"network={choice.asked}"
    return (f"avgbench: link: emulated, per host: {rates_text(choice.rate_mbit_by_host)} each way in "
            f"{choice.mtu}-byte frames{latency}; "
            f"{hosts} ({how})")
