"""summary.json's "network" section: measured wire bytes beside payload accounting, and
measured communication time beside the link's lower bound (metrics/bounds.py).

Only with network=emulated, where every peer has its own interface: wire bytes are that
interface's counters over the training loop (the step log's wire_tx/rx_bytes), so they
hold every frame the peer sent or received, headers, acknowledgements and control
traffic included.
"""
from pathlib import Path

from metrics.bounds import Round, bound_for
from metrics.jsonl import read_jsonl

MBIT = 1e6 / 8  # bytes/s per Mbit/s

METHODS = {
    "network.wire": "wire_*_bytes: the peer's own interface counters (/proc/net/dev in its namespace) from just "
                    "before its first step to the end of its last; payload_*_bytes: the strategy's payload accounting "
                    "summed over the same steps; ratio = wire / payload, protocol_overhead = ratio - 1",
    "network.efficiency": "per averaging round (a step number at which workers exchanged payload): lower "
                          "bound = the strategy's formula (metrics/bounds.py) for the round's largest per-worker "
                          "payload, B = the slowest worker link; measured = the longest comm_s of any worker in "
                          "that round (a round ends with its slowest worker); efficiency = sum of bounds / sum "
                          "of measured",
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


def efficiency(strategy: str, knobs: dict, steps_by_rank: dict[int, list[dict]], rates: list[float | None]) -> dict:
    known = bound_for(strategy)
    if known is None:
        return {"bound": None, "why": f"no lower-bound formula for strategy {strategy}"}
    function, formula = known
    if not steps_by_rank:
        return {"bound": None, "why": "no steps were logged", "formula": formula}
    worker_rates = [rates[r] for r in steps_by_rank if r < len(rates)]
    if not worker_rates or None in rates:
        return {"bound": None, "why": "some links are not shaped (no bandwidth), so no bound", "formula": formula}
    if strategy == "ps" and len(set(rates)) > 1:
        return {"bound": None, "why": "heterogeneous links under ps: server links unknown here", "formula": formula}
    rate = min(worker_rates) * MBIT
    workers = len(steps_by_rank)
    rounds_by_step: dict[int, list[dict]] = {}
    for steps in steps_by_rank.values():
        for s in steps:
            if s["bytes_sent"] or s["bytes_recv"]:
                rounds_by_step.setdefault(s["step"], []).append(s)
    bound_s = comm_s = 0.0
    for records in rounds_by_step.values():
        # a round is done when its slowest worker is: its largest payload against its longest wait
        payload = max(max(r["bytes_sent"], r["bytes_recv"]) for r in records)
        bound_s += function(Round(payload, workers, rate, knobs))
        comm_s += max(r["comm_s"] for r in records)
    rounds = len(rounds_by_step)
    return {
        "formula": formula,
        "link_mbit": rate / MBIT,
        "rounds": rounds,
        "bound_s_per_round": bound_s / rounds if rounds else None,
        "comm_s_per_round": comm_s / rounds if rounds else None,
        "efficiency": _ratio(bound_s, comm_s),
    }


def network_section(config: dict, peer_dirs: list[Path], strategy_knobs: dict) -> dict:
    network = config["network"]
    if network["name"] != "emulated":
        return {"mode": network["name"], "per_peer": False}
    from netemu.checks import rank_bandwidths

    steps_by_rank = {}
    for d in peer_dirs:
        steps = read_jsonl(d / "steps.jsonl")
        if steps and "wire_tx_bytes" in steps[-1]:
            steps_by_rank[int(d.name.removeprefix("peer"))] = steps
    rates = rank_bandwidths(network, len(peer_dirs))
    wire = {rank: wire_figures(steps) for rank, steps in steps_by_rank.items()}
    sent = sum(w["payload_sent_bytes"] for w in wire.values())
    tx = sum(w["wire_tx_bytes"] for w in wire.values())
    return {
        "mode": "emulated",
        "per_peer": True,
        "bandwidth_mbit_by_rank": rates,
        "latency_ms": network.get("latency_ms") or 0,
        "wire_by_rank": wire,
        "wire_tx_over_payload": _ratio(tx, sent),
        "protocol_overhead": _ratio(tx, sent) - 1 if sent else None,
        "efficiency": efficiency(config["strategy"]["name"], strategy_knobs, steps_by_rank, rates),
    }
