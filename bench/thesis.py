"""Thesis grid: peers 1, 2, 4, 8 (16 where the machine has 16 cores) x every strategy, on all cores.

Every multi-peer run shares the machine's C cores: N peers of peer_cpus = max(1, C // N)
(N > C oversubscribes: peers share cores round-robin, marked in the row). The reference is
one process on all C cores (strategy=single, peers=1, peer_cpus=C, batch_size per step,
as in the thesis table). Per run, from summary.json: throughput (all workers' samples /
the longest worker's training time), speedup = throughput / the reference's, scaling
efficiency = throughput / (N x throughput of single with one peer of peer_cpus threads,
measured in the same session), time-to-target (the worst worker's, evaluation pauses
excluded), the worst worker's final accuracy, exposed communication share of the step,
and hivemind's averaging group sizes and failed rounds.

    python bench/run.py thesis                              # this machine, its defaults (below)
    AVGBENCH_THESIS="model=resnet18 max_steps=60" python bench/run.py thesis   # the 16-core table
"""
import os
import shlex

from bench.jobs import averaging_strategies, summary_of

# every averaging strategy of conf/strategy/; hivemind in both of its update modes
STRATEGIES = averaging_strategies(skip={"hivemind": "run below in both modes"}) | {
    "hivemind_local": ["strategy=hivemind", "hivemind.use_local_updates=true"],
    "hivemind_grads": ["strategy=hivemind", "hivemind.use_local_updates=false"],
}
# What this machine runs by default (2 cores: ResNet18 would take hours); the env var overrides it.
DEFAULT_JOB = "model=tiny max_steps=60 eval_every=10"


def peer_counts(cores: int) -> list[int]:
    return [n for n in (1, 2, 4, 8, 16) if n < 16 or cores >= 16]


def figures(summary: dict) -> dict:
    share = summary["time_breakdown_share"]
    groups, failed, downloads = {}, 0, 0
    for peer in summary["peers"]:
        stats = (peer.get("result") or {}).get("strategy") or {}
        for size, count in (stats.get("averaging_group_sizes") or {}).items():
            groups[size] = groups.get(size, 0) + count
        failed += stats.get("allreduce_rounds_failed", 0) + stats.get("log_no_group", 0)
        downloads += stats.get("log_state_downloaded", 0)
    row = {"throughput": summary["throughput_samples_per_s"], "time_to_target_s": summary["time_to_target_s"],
           "worst_accuracy": summary["final_test_accuracy"], "comm_share": share.get("comm_s"),
           "status": summary["status"]}
    if summary["config"]["strategy"]["name"] == "hivemind":
        row |= {"averaging_group_sizes": groups, "averaging_rounds_failed": failed, "state_downloads": downloads}
    return row


def run(job: str | None = None) -> dict:
    job_args = shlex.split(job or os.environ.get("AVGBENCH_THESIS", DEFAULT_JOB))
    cores = len(os.sched_getaffinity(0))
    counts = peer_counts(cores)

    def single(cpus: int) -> dict:
        return figures(summary_of("strategy=single", "peers=1", f"peer_cpus={cpus}", *job_args))

    reference = single(cores)
    one_peer = {c: single(c) for c in sorted({max(1, cores // n) for n in counts if n > 1})}
    rows = [{"strategy": "single", "peers": 1, "peer_cpus": cores, **reference, "speedup": 1.0,
             "scaling_efficiency": 1.0}]
    for name, args in STRATEGIES.items():
        for n in counts:
            if n == 1:
                continue
            cpus = max(1, cores // n)
            try:
                row = figures(summary_of(*args, f"peers={n}", f"peer_cpus={cpus}", *job_args, timeout=3600))
            except RuntimeError as exc:  # a run that fails is a finding, not the end of the grid
                row = {"status": "failed", "throughput": None, "error": str(exc)[-600:]}
            throughput = row["throughput"]
            rows.append({"strategy": name, "peers": n, "peer_cpus": cpus, "oversubscribed": n * cpus > cores, **row,
                         "speedup": throughput / reference["throughput"] if throughput else None,
                         "scaling_efficiency": throughput / (n * one_peer[cpus]["throughput"]) if throughput else None})
    at_eight = {r["strategy"]: r["speedup"] for r in rows if r["peers"] == 8}
    return {
        "name": "thesis_grid",
        "ratio": at_eight.get("allreduce") or 0.0,
        "goal": ">= 1.6 allreduce, stepwise; >= 1.2 ps; >= 1.3 hivemind_local (8 peers vs 1 process, 16 cores)",
        "speedup_at_8_peers": at_eight,
        "rows": rows,
        "one_peer_baselines": one_peer,
        "setup": f"{cores} cores, peers {counts}, {' '.join(job_args)}, data=digits, batch 32 per peer",
        "method": __doc__.strip(),
    }
