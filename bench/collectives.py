"""Collective (link) efficiency: the link floor / the measured link time, per averaging strategy, N and
link rate on emulated hosts."""
import statistics

from bench.jobs import averaging_strategies, grid_settings, ints, summary_of

STRATEGIES = averaging_strategies("collectives")


def measure(strategy: str, peers: int, rate: int, width: int, steps: int) -> dict:
    summary = summary_of(*STRATEGIES[strategy], f"peers={peers}", "network=emulated",
                         f"network.bandwidth_mbit={rate}", "model=mlp", f"model.width={width}",
                         f"max_steps={steps}", "eval_every=0")
    network = summary.network
    eff = network.efficiency
    return {"strategy": strategy, "peers": peers, "mbit": rate, "efficiency": eff.efficiency, "method": eff.method,
            "floor_s_per_round": eff.bound_s_per_round, "measured_s_per_round": eff.measured_s_per_round,
            "isolated_round_latency_s": eff.isolated_round.latency_s_per_round,
            "payload_bytes_per_step": summary.bytes_sent_per_step,
            "wire_over_payload": network.wire_tx_over_payload,
            "busiest_wire_over_mean": network.busiest.busiest_over_mean}


def check_at_most_one(rows: list[dict]) -> None:
    """No run beats its link floor: an efficiency above 1 is a wrong floor or a wrong measurement."""
    if above := [r for r in rows if r["efficiency"] and r["efficiency"] > 1]:
        raise AssertionError(f"link efficiency above 1: {above}")


DEFAULT_GRID = f"rates=20,50,200 peers=2,4,8 strategies={','.join(STRATEGIES)} width=768 steps=6"


def run(text: str | None = None) -> dict:
    settings = grid_settings(DEFAULT_GRID, "--collectives-grid", text)
    peers, rates, width, steps = (ints(settings["peers"]), ints(settings["rates"]), int(settings["width"]),
                                  int(settings["steps"]))
    chosen = settings["strategies"].split(",")
    rows = [measure(s, n, r, width, steps) for s in chosen for n in peers for r in rates]
    check_at_most_one(rows)
    worst = {s: min((row["efficiency"] for row in rows if row["strategy"] == s and row["efficiency"]), default=None)
             for s in chosen}
    return {
        "name": "collective_efficiency",
        "ratio": statistics.median(row["efficiency"] for row in rows if row["efficiency"]),
        "goal": ">= 0.85 (ps, stepwise, allreduce), <= 1 all",
        "worst_by_strategy": worst,
        "best": max(row["efficiency"] for row in rows if row["efficiency"]),
        "rows": rows,
        "setup": f"model=mlp width={width}, {steps} steps, N={list(peers)}, links {list(rates)} Mbit/s (median shown)",
    }
