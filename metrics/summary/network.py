"""summary.json's "network" (network=emulated): each process's wire bytes beside its payload, and the link floor."""
import json

from metrics.summary.bounds import LinkBound, link_efficiency
from metrics.recording.jsonl import read_jsonl
from metrics.recording.rundir import PeerDir, RunDir
from metrics.recording.methods import methods
from metrics.recording.sampler import DRAIN_TIMEOUT_S

METHODS = methods("network", DRAIN_TIMEOUT_S=DRAIN_TIMEOUT_S)


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def wire_figures(steps: list[dict], drained: dict | None = None) -> dict:
    """Payload against wire bytes: those read once the interface drained after training (a peer that ended its run),
    else the last step's."""
    sent = sum(s["bytes_sent"] for s in steps)
    recv = sum(s["bytes_recv"] for s in steps)
    tx, rx = ((drained or steps[-1])[key] for key in ("wire_tx_bytes", "wire_rx_bytes"))
    return {
        "payload_sent_bytes": sent, "payload_recv_bytes": recv,
        "wire_tx_bytes": tx, "wire_rx_bytes": rx,
        "tx_ratio": _ratio(tx, sent), "rx_ratio": _ratio(rx, recv),
    }


def built_links(run: RunDir, figure: str) -> list:
    """A figure (bandwidth_mbit, None: unshaped; or latency_ms) of each process's link as the placement built it."""
    hosts = json.loads(run.network.read_text())["hosts"]
    return [h[figure] for h in sorted(hosts, key=lambda h: h["index"])]


def link_rates(run: RunDir) -> list[float | None]:
    """Mbit/s of each process's link, as the placement built it (None: unshaped)."""
    return built_links(run, "bandwidth_mbit")


def drained_wire(peer: PeerDir) -> dict | None:
    """The wire counters a peer read after training, once its interface had drained (job/loop.py)."""
    if not peer.result.exists():
        return None
    return json.loads(peer.result.read_text()).get("wire_after_training")


def busiest(wire: dict[int, dict]) -> dict | None:
    """The process whose interface carried the most bytes in one direction, and the mean over processes."""
    if not wire:
        return None
    rank = max(wire, key=lambda r: max(wire[r]["wire_tx_bytes"], wire[r]["wire_rx_bytes"]))
    peak = max(wire[rank]["wire_tx_bytes"], wire[rank]["wire_rx_bytes"])
    mean = sum(max(w["wire_tx_bytes"], w["wire_rx_bytes"]) for w in wire.values()) / len(wire)
    return {"rank": rank, "wire_bytes": peak, "mean_wire_bytes": mean, "busiest_over_mean": _ratio(peak, mean)}


def network_section(run: RunDir, config: dict, strategy: LinkBound = LinkBound()) -> dict:
    network = config["network"]
    if not run.network.exists():
        return {"mode": network["name"], "per_peer": False}
    logged = {peer.rank: read_jsonl(peer.steps) for peer in run.peers()}
    steps_by_rank = {rank: steps for rank, steps in logged.items() if steps and "wire_tx_bytes" in steps[-1]}
    rates = link_rates(run)
    wire = {rank: wire_figures(steps, drained_wire(run.peer(rank))) for rank, steps in steps_by_rank.items()}
    sent = sum(w["payload_sent_bytes"] for w in wire.values())
    tx = sum(w["wire_tx_bytes"] for w in wire.values())
    return {
        "mode": network["name"],
        "per_peer": True,
        "bandwidth_mbit_by_rank": rates,
        "latency_ms": max(built_links(run, "latency_ms"), default=0),  # as built, like the rates
        "wire_by_rank": wire,
        "wire_tx_over_payload": _ratio(tx, sent),
        "protocol_overhead": tx / sent - 1 if sent else None,
        "busiest": busiest(wire),
        "efficiency": link_efficiency(strategy, steps_by_rank, rates),
    }
