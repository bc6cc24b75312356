"""summary.json: one run's figures, computed from the per-peer logs after the run.

Works on partial logs too (a crashed run keeps what it wrote). Every figure has one
definition for all strategies, stated in METHODS and written into the summary.
"""
import json
import statistics

from metrics.jsonl import read_jsonl
from metrics.network import METHODS as NETWORK_METHODS
from metrics.network import network_section
from metrics.rundir import PeerDir, RunDir

PHASES = ("data_s", "compute_s", "comm_s", "opt_s")

METHODS = {
    "throughput_samples_per_s": "all workers' trained samples / the longest worker's training time: its wall time "
                                "from the start of its first step to the end of its last (which holds its last "
                                "communication, e.g. a final averaging round), minus its evaluation pauses",
    "time_breakdown_s": "mean per step over all workers (perf_counter): data_s = fetching the batch; compute_s = "
                        "forward and backward up to the moment the last gradient was accumulated; opt_s = the "
                        "optimizer update; comm_s = exposed communication = step wall - data - compute - opt "
                        "(communication hidden behind backward is not in it; waiting for other peers is)",
    "bytes_per_step": "payload accounting: bytes of the tensors the strategy exchanged per worker per step, from "
                      "exact accounting (for library collectives, the algorithm's payload); no protocol headers. "
                      "Per sample: all workers' payload bytes / all workers' samples. Wire measurements are under "
                      "network.wire (network=emulated only)",
    "accuracy_by_worker": "every worker evaluates its own model on the whole held-out split at the same steps; "
                          "mean, worst and best over workers of their last evaluation. final_test_accuracy and "
                          "final_test_loss are the worst worker's",
    "time_to_target_s": "training time (evaluation pauses excluded) at which the worst worker reached the target: "
                        "the latest of the workers' first evaluations reaching it (null if any worker never did)",
    "effective_lr": "the learning rate after lr_scaling to the strategy's effective batch (samples behind one "
                    "optimizer update, launch.json), before any warm-up; as the first worker reports it",
    "device": "where the workers trained: the device knob resolved before launch (auto: cuda when torch sees a "
              "GPU), the GPUs used, and gpu_shared = some host ran more peers than it has GPUs, so peers shared "
              "a GPU (allowed for experiments; their throughput is not that of one GPU per peer)",
    "peak_rss_bytes": "max over samples of the RSS summed over the peer's process tree",
    "cpu_percent": "CPU time of the peer's process tree per sampler interval (100 = one core)",
    "network": "cumulative /proc/net/dev counters of the peer's network namespace, last minus first sample",
    "fault": "run_ended_after_s: from the injected fault (the peer's clock just before acting) "
             "to the launcher deciding the run's outcome",
    **NETWORK_METHODS,
}


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def reached(evaluation: dict, target: dict) -> bool:
    value = evaluation.get(target["metric"])
    if value is None:
        return False
    return value >= target["value"] if target["metric"] == "test_accuracy" else value <= target["value"]


def peer_figures(peer: PeerDir) -> dict:
    steps = read_jsonl(peer.steps)
    evals = read_jsonl(peer.evals)
    resources = read_jsonl(peer.resources)
    figures = {
        "rank": peer.rank,
        "steps": steps[-1]["step"] if steps else 0,
        "samples": steps[-1]["samples"] if steps else 0,
        "train_s": steps[-1]["train_s"] if steps else 0.0,
        "final_eval": evals[-1] if evals else None,
        "result": json.loads(peer.result.read_text()) if peer.result.exists() else None,
        "error": peer.error.read_text() if peer.error.exists() else None,
    }
    if resources:
        first, last = resources[0], resources[-1]
        figures |= {
            "peak_rss_bytes": max(r["rss_bytes"] for r in resources),
            "mean_cpu_percent": _mean(r["cpu_percent"] for r in resources[1:]) or resources[0]["cpu_percent"],
            "disk_read_bytes": last["read_bytes"] - first["read_bytes"],
            "disk_write_bytes": last["write_bytes"] - first["write_bytes"],
            "net_rx_bytes": last["net_rx_bytes"] - first["net_rx_bytes"],
            "net_tx_bytes": last["net_tx_bytes"] - first["net_tx_bytes"],
            "lo_rx_bytes": last["lo_rx_bytes"] - first["lo_rx_bytes"],
            "lo_tx_bytes": last["lo_tx_bytes"] - first["lo_tx_bytes"],
        }
    return figures


def device_of(config: dict, workers: list[dict]) -> dict:
    results = [w["result"] for w in workers if w["result"]]
    return {"name": config.get("device", "cpu"),
            "gpus": sorted({r["device"] for r in results if r.get("device", "cpu") != "cpu"}),
            "gpu_shared": any(r.get("gpu_shared", False) for r in results)}


def worker_accuracy(evals_by_rank: dict[int, list[dict]], target: dict) -> dict:
    """Final accuracy over workers (mean, worst, best) and the time the worst worker reached the target."""
    finals = {rank: evals[-1] for rank, evals in evals_by_rank.items() if evals}
    accuracy = {rank: e.get("test_accuracy") for rank, e in finals.items()}
    hits = {rank: next((e for e in evals if reached(e, target)), None) for rank, evals in evals_by_rank.items()}
    all_hit = bool(hits) and all(hits.values())
    last_hit = max(hits.values(), key=lambda e: e["train_s"]) if all_hit else None
    known = [a for a in accuracy.values() if a is not None]
    return {
        "accuracy_by_worker": {
            "mean": statistics.fmean(known) if known else None,
            "worst": min(known) if known else None,
            "best": max(known) if known else None,
            "by_rank": accuracy,
        },
        "final_test_accuracy": min(known) if known else None,
        "final_test_loss": max((e["test_loss"] for e in finals.values()), default=None),
        "time_to_target_s": last_hit["train_s"] if last_hit else None,
        "steps_to_target": last_hit["step"] if last_hit else None,
        "time_to_target_by_rank": {rank: (e["train_s"] if e else None) for rank, e in hits.items()},
    }


def build_summary(run: RunDir, config: dict, outcome, knobs: dict | None = None, bound=None,
                  bound_formula: str | None = None, is_baseline: bool = False,
                  failure_counters: tuple[str, ...] = ()) -> dict:
    """knobs, bound (a function of metrics.bounds.Round), bound_formula, is_baseline (a
    single-process run that others are compared with) and failure_counters (the keys of its peers'
    figures that count failures) come from the run's strategy."""
    peers = run.peers()
    figures = [peer_figures(p) for p in peers]
    worker_dirs = [p for p in peers if p.steps.exists()]
    workers = [f for f, p in zip(figures, peers) if p.steps.exists()]
    all_steps = [s for p in worker_dirs for s in read_jsonl(p.steps)]
    total_samples = sum(w["samples"] for w in workers)
    longest = max((w["train_s"] for w in workers), default=0.0)

    breakdown = {phase: _mean(s[phase] for s in all_steps) for phase in PHASES}
    step_total = sum(v or 0.0 for v in breakdown.values())
    shares = {phase: (v or 0.0) / step_total for phase, v in breakdown.items()} if step_total else {}

    faults = sorted((json.loads(p.fault.read_text()) for p in peers if p.fault.exists()), key=lambda f: f["time"])
    fault = faults[0] | {"survived": outcome.status == "completed",
                         "run_ended_after_s": outcome.ended_at - faults[0]["time"]} if faults else None
    sent = _mean(s["bytes_sent"] for s in all_steps)
    recv = _mean(s["bytes_recv"] for s in all_steps)
    accuracy = worker_accuracy({p.rank: read_jsonl(p.evals) for p in worker_dirs}, config["target"])
    return {
        "status": outcome.status,
        "exit_code": outcome.exit_code,
        "error": outcome.error,
        "failed_rank": outcome.failed_rank,
        "lost_peers": outcome.lost_peers,
        "fault": fault,
        "config": config,
        "strategy_knobs": knobs or {},
        "is_baseline": is_baseline,
        "failure_counters": list(failure_counters),
        "workers": len(workers),
        "device": device_of(config, workers),
        "data_is_synthetic": config["data"]["name"] == "synthetic",
        "network_scope": "per-peer namespace" if run.network.exists()
                         else "host-wide (shared by all peers, not attributable to one)",
        "wall_s": outcome.wall_s,
        "total_samples": total_samples,
        "throughput_samples_per_s": total_samples / longest if longest else None,
        **accuracy,
        "target": config["target"],
        "effective_lr": next((w["result"]["effective_lr"] for w in workers
                              if w["result"] and "effective_lr" in w["result"]), None),
        "time_breakdown_s": breakdown,
        "time_breakdown_share": shares,
        "bytes_sent_per_step": sent,
        "bytes_recv_per_step": recv,
        "bytes_sent_per_sample": sum(s["bytes_sent"] for s in all_steps) / total_samples if total_samples else None,
        "bytes_recv_per_sample": sum(s["bytes_recv"] for s in all_steps) / total_samples if total_samples else None,
        "network": network_section(run, config, knobs or {}, bound, bound_formula),
        "peers": figures,
        "methods": METHODS,
    }


def write_summary(run: RunDir, config: dict, outcome, knobs: dict | None = None, bound=None,
                  bound_formula: str | None = None, is_baseline: bool = False,
                  failure_counters: tuple[str, ...] = ()) -> dict:
    summary = build_summary(run, config, outcome, knobs, bound, bound_formula, is_baseline, failure_counters)
    run.summary.write_text(json.dumps(summary, indent=1, default=str))
    return summary
