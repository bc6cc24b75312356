"""Step-wise (one pass) vs ring all-reduce (Horovod): bytes per worker per round and round time."""
from collections.abc import Sequence

from bench.jobs import summary_of


def measure(strategy: list[str], peers: int, rate: int, width: int, steps: int) -> dict:
    summary = summary_of(*strategy, f"peers={peers}", "network=emulated", f"network.bandwidth_mbit={rate}",
                         "model=mlp", f"model.width={width}", f"max_steps={steps}", "eval_every=0")
    return {"bytes": summary.bytes_sent_per_step, "round_s": summary.network.efficiency.measured_s_per_round}


def run(peers: Sequence[int] = (2, 4, 8), rate: int = 100, width: int = 768, steps: int = 5) -> dict:
    rows = []
    for n in peers:
        stepwise = measure(["strategy=stepwise"], n, rate, width, steps)
        ring = measure(["strategy=ring", "ring.controller=mpi"], n, rate, width, steps)
        rows.append({"peers": n, "stepwise": stepwise, "ring": ring,
                     "bytes_ratio": stepwise["bytes"] / ring["bytes"],
                     "round_time_ratio": stepwise["round_s"] / ring["round_s"]})
    return {
        "name": "stepwise_vs_ring",
        "ratio": rows[-1]["round_time_ratio"],
        "goal": "< 1 (round time, largest N)",
        "rows": rows,
        "setup": f"model=mlp width={width}, {steps} steps, N={list(peers)}, {rate} Mbit/s links",
    }
