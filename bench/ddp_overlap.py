"""DDP all-reduce (buckets overlapped with backward) / one flat all-reduce after backward.

Both arms run strategy=allreduce over gloo on loopback with the same model, data, peers
and steps; only allreduce.ddp differs. The arms alternate `repeats` times in one session
(this machine is noisy) and the ratio is of the median throughputs (summary.json's
throughput_samples_per_s: all workers' samples / the longest worker's training time).
The time breakdown (mean exposed communication and compute per step) is kept as the profile.
"""
import statistics

from bench.jobs import summary_of


def measure(ddp: bool, peers: int, model: str, steps: int) -> dict:
    summary = summary_of("strategy=allreduce", f"allreduce.ddp={str(ddp).lower()}", f"peers={peers}",
                         f"model={model}", f"max_steps={steps}", "eval_every=0")
    return {"throughput": summary.throughput_samples_per_s, "breakdown_s": summary.time_breakdown_s}


def run(peers: int = 4, model: str = "resnet18", steps: int = 12, repeats: int = 3) -> dict:
    arms = {"ddp": [], "flat": []}
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
        "method": __doc__.strip(),
    }
