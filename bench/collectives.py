"""Collective efficiency: link lower bound / measured comm time per averaging round.

Each strategy trains `steps` steps of the payload model (model=mlp, width set below)
with every peer on its own emulated host (network=emulated) behind a token-bucket link
of `rate` Mbit/s. The summary's network.efficiency gives, over all worker-rounds,
sum(bound) / sum(comm_s); bounds per strategy are in metrics/bounds.py
(ring 2(N-1)/N*S/B, ps N*S/B at the server link, chain S/B*(1+(N-1)/chunks)).
ring is Horovod with the MPI controller. Goal: >= 0.8 for ps and stepwise.
"""
import statistics

from bench.jobs import summary_of

STRATEGIES = {
    "ps": ["strategy=ps"],
    "stepwise": ["strategy=stepwise"],
    "allreduce": ["strategy=allreduce"],
    "ring": ["strategy=ring", "ring.controller=mpi"],
}


def measure(strategy: str, peers: int, rate: int, width: int, steps: int) -> dict:
    summary = summary_of(*STRATEGIES[strategy], f"peers={peers}", "network=emulated",
                         f"network.bandwidth_mbit={rate}", "model=mlp", f"model.width={width}",
                         f"max_steps={steps}", "eval_every=0")
    eff = summary["network"]["efficiency"]
    return {"strategy": strategy, "peers": peers, "mbit": rate, "efficiency": eff["efficiency"],
            "bound_s_per_round": eff["bound_s_per_round"], "comm_s_per_round": eff["comm_s_per_round"],
            "payload_bytes_per_step": summary["bytes_sent_per_step"],
            "wire_over_payload": summary["network"]["wire_tx_over_payload"]}


def run(peers=(2, 4), rates=(50, 200), width: int = 768, steps: int = 6) -> dict:
    rows = [measure(s, n, r, width, steps) for s in STRATEGIES for n in peers for r in rates]
    worst = {s: min(row["efficiency"] for row in rows if row["strategy"] == s) for s in STRATEGIES}
    return {
        "name": "collective_efficiency",
        "ratio": statistics.median(row["efficiency"] for row in rows),
        "goal": ">= 0.8 (ps, stepwise)",
        "worst_by_strategy": worst,
        "rows": rows,
        "setup": f"model=mlp width={width}, {steps} steps, N={list(peers)}, links {list(rates)} Mbit/s (median shown)",
        "method": __doc__.strip(),
    }
