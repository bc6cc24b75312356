"""Collective (link) efficiency: the link's lower bound / the measured communication per averaging round.

Each averaging strategy of conf/strategy/ trains `steps` steps of the payload model (model=mlp, width set below)
with every process on its own emulated host (network=emulated) behind a token-bucket
link of `rate` Mbit/s. The summary's network.efficiency gives sum(bound) / sum(measured)
over the rounds; each strategy states its bound in its own link_bound (ring and allreduce
2(N-1)/N*S/B, ps 2*N*S/B at the server link in sync mode, stepwise S/B*(1+(N-2)/chunks),
hivemind P/B per peer). Measured: the round's exposed communication, or for strategies
that overlap it with backward (DDP, Horovod) the span from the first gradient handed over
to the last transfer done. ring is Horovod with the MPI controller. Goal: >= 0.85 for ps,
stepwise and allreduce; no efficiency can exceed 1.
"""
import statistics

from bench.jobs import averaging_strategies, summary_of

# every averaging strategy of conf/strategy/, some with settings of this benchmark
STRATEGIES = averaging_strategies(tweaks={
    "ring": ["ring.controller=mpi"],
    "hivemind": ["hivemind.target_batch_size=64", "hivemind.delay_state_averaging=false"],
})


def measure(strategy: str, peers: int, rate: int, width: int, steps: int) -> dict:
    summary = summary_of(*STRATEGIES[strategy], f"peers={peers}", "network=emulated",
                         f"network.bandwidth_mbit={rate}", "model=mlp", f"model.width={width}",
                         f"max_steps={steps}", "eval_every=0")
    eff = summary["network"]["efficiency"]
    return {"strategy": strategy, "peers": peers, "mbit": rate, "efficiency": eff.get("efficiency"),
            "bound_s_per_round": eff.get("bound_s_per_round"), "measured_s_per_round": eff.get("measured_s_per_round"),
            "payload_bytes_per_step": summary["bytes_sent_per_step"],
            "wire_over_payload": summary["network"]["wire_tx_over_payload"]}


def run(peers=(2, 4), rates=(50, 200), width: int = 768, steps: int = 6) -> dict:
    rows = [measure(s, n, r, width, steps) for s in STRATEGIES for n in peers for r in rates]
    worst = {s: min((row["efficiency"] for row in rows if row["strategy"] == s and row["efficiency"]), default=None)
             for s in STRATEGIES}
    return {
        "name": "collective_efficiency",
        "ratio": statistics.median(row["efficiency"] for row in rows if row["efficiency"]),
        "goal": ">= 0.85 (ps, stepwise, allreduce), <= 1 all",
        "worst_by_strategy": worst,
        "best": max(row["efficiency"] for row in rows if row["efficiency"]),
        "rows": rows,
        "setup": f"model=mlp width={width}, {steps} steps, N={list(peers)}, links {list(rates)} Mbit/s (median shown)",
        "method": __doc__.strip(),
    }
