"""DDP all-reduce (buckets overlapped with backward) against one flat all-reduce after backward."""
import statistics
from typing import Any

from bench.jobs import summary_of


def measure(ddp: bool, peers: int, model: str, steps: int) -> dict:
    summary = summary_of("strategy=allreduce", f"allreduce.ddp={str(ddp).lower()}", f"peers={peers}",
                         f"model={model}", f"max_steps={steps}", "eval_every=0")
    return {"throughput": summary.throughput_samples_per_s, "breakdown_s": summary.time_breakdown_s}


def run(peers: int = 4, model: str = "resnet18", steps: int = 12, repeats: int = 3) -> dict:
    arms: dict[str, list[dict[str, Any]]] = {"ddp": [], "flat": []}
    for _ in range(repeats):
        arms["ddp"].append(measure(True, peers, model, steps))
        arms["flat"].append(measure(False, peers, model, steps))
    median = {arm: statistics.median(r["throughput"] for r in rows) for arm, rows in arms.items()}
    return {
        "name": "ddp_overlap",
        "ratio": median["ddp"] / median["flat"],
        "goal": ">= 1.0",
        "median_samples_per_s": median,
        "rows": arms,
        "setup": f"allreduce over gloo, loopback, model={model}, N={peers}, {steps} steps, {repeats} alternated repeats",
    }
