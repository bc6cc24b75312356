"""A link a projection is made for, and the one conversion of its nominal rate to the payload rate every prediction
uses (payload_rate: nominal rate x the payload share conf/evidence.json records for its frame size;
docs/projection.md)."""
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from metrics.summary.bounds import ETHERNET_MTU, MBIT

NETWORK_PRESETS = Path(__file__).resolve().parents[2] / "conf" / "network"


@dataclass
class Link:
    name: str
    mbit: float          # nominal Mbit/s per direction
    latency_ms: float    # one-way
    source: str          # where the figures come from
    mtu: int = ETHERNET_MTU  # frame size: the largest IP packet, in bytes
    devices_per_node: int = 1     # the link is each node's, shared by its devices (1: one worker per link)
    intra_node_mbit: float = 0.0  # between a node's devices, Mbit/s per direction, all of it payload
    intra_node_latency_ms: float = 0.0
    ps_servers: int | None = None  # ps's server count (None: the run's own)
    ps_placement: str = "dedicated"  # ps's servers on links of their own, or "colocated" on the workers' nodes

    @property
    def label(self) -> str:
        nodes = (f", nodes of {self.devices_per_node} devices joined by {self.intra_node_mbit:g} Mbit/s, "
                 f"{self.intra_node_latency_ms:g} ms" if self.devices_per_node > 1 else "")
        count = self.ps_servers or "the run's"
        servers = f", {count} {self.ps_placement} ps servers" if self.ps_servers or self.ps_placement != "dedicated" \
            else ""
        return f"{self.name} ({self.mbit:g} Mbit/s, {self.latency_ms:g} ms, {self.mtu}-byte frames{nodes}{servers})"


PS_PLACEMENTS = ("dedicated", "colocated")


def cluster_problems(link: Link, peers: list[int]) -> list[str]:
    """Why `peers` devices do not fit `link`'s cluster shape: whole nodes, at most one co-located server per node."""
    problems = []
    if partial := [n for n in peers if n % link.devices_per_node]:
        problems.append(f"{' '.join(map(str, partial))} devices fill no whole nodes of {link.devices_per_node} devices "
                        "(devices-per-node)")
    if link.ps_placement not in PS_PLACEMENTS:
        problems.append(f"ps placement {link.ps_placement!r}: choose {' or '.join(PS_PLACEMENTS)}")
    if link.ps_placement == "colocated" and (few := [n for n in peers if n // link.devices_per_node
                                                     < (link.ps_servers or 1)]):
        problems.append(f"{' '.join(map(str, few))} devices: fewer nodes than the {link.ps_servers or 1} co-located "
                        "ps servers (one per node)")
    return problems


def payload_share(shares: Mapping[int, float], mtu: int) -> float:
    """The measured payload share of a link of `mtu`-byte frames (shares: by frame size, Evidence.payload_shares)."""
    if mtu not in shares:
        raise ValueError(f"no payload share measured for {mtu}-byte frames (measured: "
                         f"{', '.join(f'{m} bytes' for m in sorted(shares))}; python bench/run.py goodput)")
    return shares[mtu]


def payload_rate(link: Link, shares: Mapping[int, float]) -> float:
    """Payload bytes/s per direction on `link`: its nominal rate x the payload share measured for its frames."""
    return link.mbit * MBIT * payload_share(shares, link.mtu)


def preset_link(name: str) -> Link:
    """An emulated preset of conf/network: its bandwidth_mbit and latency_ms (emulated.yaml's where it sets none)."""
    path = NETWORK_PRESETS / f"{name}.yaml"
    if not path.exists():
        raise ValueError(f"no network preset {name!r} in {NETWORK_PRESETS} (or give MBIT[,LATENCY_MS])")
    settings = yaml.safe_load((NETWORK_PRESETS / "emulated.yaml").read_text()) | yaml.safe_load(path.read_text())
    if not settings.get("bandwidth_mbit"):
        raise ValueError(f"the network preset {name!r} sets no link rate (unshaped); give one as MBIT[,LATENCY_MS]")
    return Link(name, float(settings["bandwidth_mbit"]), float(settings.get("latency_ms") or 0.0),
                f"conf/network/{name}.yaml")


def parse_link(text: str, given_as: str = "--link") -> Link:
    """`wan`, `wan,40` (a preset with another latency), `1000` or `1000,0.2` (Mbit/s, one-way ms), each with an
    optional third field, the frame size in bytes (`1000,0.2,9000`; default: standard Ethernet's 1500, a preset's
    too: its network.mtu is the emulator's, not the cluster's)."""
    name, latency, mtu, *extra = text.split(",") + ["", ""]
    try:
        if any(extra):
            raise ValueError("give at most RATE,LATENCY_MS,MTU")
        link = (Link(f"{float(name):g} Mbit/s", float(name), 0.0, given_as) if name[:1].isdigit()
                else preset_link(name))
        if latency:
            link.latency_ms, link.source = float(latency), f"{link.source}, latency from {given_as}"
        if mtu:
            link.mtu, link.source = int(mtu), f"{link.source}, frames from {given_as}"
    except ValueError as exc:
        raise ValueError(f"{given_as} {text}: {exc}") from exc
    if link.mbit <= 0 or link.latency_ms < 0 or link.mtu < 68:
        raise ValueError(f"{given_as} {text}: the rate must be > 0, the latency >= 0 and the frame size >= 68 bytes")
    return link
