"""A link a projection is made for, and the one conversion of its nominal rate to the payload rate every prediction
uses (payload_rate: nominal rate x the payload share conf/evidence.json records; docs/projection.md)."""
from dataclasses import dataclass
from pathlib import Path

import yaml

from metrics.summary.bounds import MBIT

NETWORK_PRESETS = Path(__file__).resolve().parents[2] / "conf" / "network"


@dataclass
class Link:
    name: str
    mbit: float          # nominal Mbit/s per direction
    latency_ms: float    # one-way
    source: str          # where the figures come from

    @property
    def label(self) -> str:
        return f"{self.name} ({self.mbit:g} Mbit/s, {self.latency_ms:g} ms)"


def payload_rate(link: Link, payload_share: float) -> float:
    """Payload bytes/s per direction on `link`: its nominal rate x the measured payload share."""
    return link.mbit * MBIT * payload_share


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
    """`wan`, `wan,40` (a preset with another latency), `1000` or `1000,0.2` (Mbit/s, one-way ms)."""
    name, _, latency = text.partition(",")
    try:
        link = (Link(f"{float(name):g} Mbit/s", float(name), 0.0, given_as) if name[:1].isdigit()
                else preset_link(name))
        if latency:
            link.latency_ms, link.source = float(latency), f"{link.source}, latency from {given_as}"
    except ValueError as exc:
        raise ValueError(f"{given_as} {text}: {exc}") from exc
    if link.mbit <= 0 or link.latency_ms < 0:
        raise ValueError(f"{given_as} {text}: the rate must be > 0 and the latency >= 0")
    return link
