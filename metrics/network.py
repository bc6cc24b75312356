"""summary.json's "network" section: measured wire bytes beside payload accounting, and
measured communication time beside the link's lower bound (metrics/bounds.py).

Only with network=emulated, where every process has its own interface: wire bytes are that
interface's counters over the training loop (the step log's wire_tx/rx_bytes), so they
hold every frame the peer sent or received, headers, acknowledgements and control
traffic included. Link rates come from the placement's record, RUN/.avgbench/network.json.
"""
import json

from metrics.bounds import link_efficiency
from metrics.jsonl import read_jsonl
from metrics.rundir import RunDir

METHODS = {
    "network.wire": "wire measurement: wire_*_bytes are the peer's own interface counters (/proc/net/dev in its "
                    "namespace) from just before its first step to the end of its last; payload accounting: "
                    "payload_*_bytes, the strategy's exact count of the tensor bytes it exchanged over the same "
                    "steps; ratio = wire / payload, protocol_overhead = ratio - 1",
    "network.efficiency": "per averaging round (steps with payload, grouped by the strategy's round id): lower "
                          "bound = the strategy's formula for the round's largest per-worker payload over the "
                          "slowest worker link; measured = the longest time any worker's communication took in "
                          "that round (exposed communication, or for strategies that overlap it with backward the "
                          "span from the first gradient handed over to the last transfer done); efficiency = sum "
                          "of bounds / sum of measured (at most 1)",
}


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def wire_figures(steps: list[dict]) -> dict:
    sent = sum(s["bytes_sent"] for s in steps)
    recv = sum(s["bytes_recv"] for s in steps)
    tx, rx = steps[-1]["wire_tx_bytes"], steps[-1]["wire_rx_bytes"]
    return {
        "payload_sent_bytes": sent, "payload_recv_bytes": recv,
        "wire_tx_bytes": tx, "wire_rx_bytes": rx,
        "tx_ratio": _ratio(tx, sent), "rx_ratio": _ratio(rx, recv),
    }


def link_rates(run: RunDir) -> list[float | None]:
    """Mbit/s of each process's link, as the placement built it (None: unshaped)."""
    hosts = json.loads(run.network.read_text())["hosts"]
    return [h["bandwidth_mbit"] for h in sorted(hosts, key=lambda h: h["index"])]


def network_section(run: RunDir, config: dict, knobs: dict, bound=None, formula: str | None = None) -> dict:
    network = config["network"]
    if not run.network.exists():
        return {"mode": network["name"], "per_peer": False}
    steps_by_rank = {}
    for peer in run.peers():
        steps = read_jsonl(peer.steps)
        if steps and "wire_tx_bytes" in steps[-1]:
            steps_by_rank[peer.rank] = steps
    rates = link_rates(run)
    wire = {rank: wire_figures(steps) for rank, steps in steps_by_rank.items()}
    sent = sum(w["payload_sent_bytes"] for w in wire.values())
    tx = sum(w["wire_tx_bytes"] for w in wire.values())
    return {
        "mode": network["name"],
        "per_peer": True,
        "bandwidth_mbit_by_rank": rates,
        "latency_ms": network.get("latency_ms") or 0,
        "wire_by_rank": wire,
        "wire_tx_over_payload": _ratio(tx, sent),
        "protocol_overhead": _ratio(tx, sent) - 1 if sent else None,
        "efficiency": link_efficiency(bound, formula, knobs, steps_by_rank, rates),
    }
