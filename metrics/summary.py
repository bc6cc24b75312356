"""summary.json: one run's figures, computed from the per-peer logs after the run.

Works on partial logs too (a crashed run keeps what it wrote).
"""
import json
import statistics
from pathlib import Path

from metrics.jsonl import read_jsonl
from metrics.network import METHODS as NETWORK_METHODS
from metrics.network import network_section

PHASES = ("data_s", "compute_s", "comm_s", "opt_s")

METHODS = {
    "throughput_samples_per_s": "all peers' trained samples / the longest peer's training time "
                                "(wall time of its loop minus its own evaluation pauses)",
    "time_breakdown_s": "mean per step over all workers, perf_counter around each phase; "
                        "comm_s includes waiting for other peers",
    "bytes_per_step": "payload bytes per worker per step from exact accounting of the tensors "
                      "the strategy exchanged (no protocol headers)",
    "time_to_target_s": "training time (evaluation pauses excluded) of the lowest-rank worker "
                        "at its first evaluation reaching the target",
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


def _reached(evaluation: dict, target) -> bool:
    value = evaluation.get(target.metric)
    if value is None:
        return False
    return value >= target.value if target.metric == "test_accuracy" else value <= target.value


def peer_figures(peer_dir: Path) -> dict:
    steps = read_jsonl(peer_dir / "steps.jsonl")
    evals = read_jsonl(peer_dir / "eval.jsonl")
    resources = read_jsonl(peer_dir / "resources.jsonl")
    result_path = peer_dir / "result.json"
    figures = {
        "rank": int(peer_dir.name.removeprefix("peer")),
        "steps": steps[-1]["step"] if steps else 0,
        "samples": steps[-1]["samples"] if steps else 0,
        "train_s": steps[-1]["train_s"] if steps else 0.0,
        "final_eval": evals[-1] if evals else None,
        "result": json.loads(result_path.read_text()) if result_path.exists() else None,
        "error": (peer_dir / "error.txt").read_text() if (peer_dir / "error.txt").exists() else None,
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


def build_summary(run_dir: Path, config: dict, outcome, strategy_knobs: dict | None = None) -> dict:
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(config)
    peer_dirs = sorted(run_dir.glob("peer*"), key=lambda p: int(p.name.removeprefix("peer")))
    peers = [peer_figures(p) for p in peer_dirs]
    workers = [p for p, d in zip(peers, peer_dirs) if (d / "steps.jsonl").exists()]
    all_steps = [s for p in peer_dirs for s in read_jsonl(p / "steps.jsonl")]
    total_samples = sum(p["samples"] for p in workers)
    longest = max((p["train_s"] for p in workers), default=0.0)

    breakdown = {phase: _mean(s[phase] for s in all_steps) for phase in PHASES}
    step_total = sum(v or 0.0 for v in breakdown.values())
    shares = {phase: (v or 0.0) / step_total for phase, v in breakdown.items()} if step_total else {}

    reference = next((p for p in workers if p["steps"] > 0), None)
    evals = read_jsonl(run_dir / f"peer{reference['rank']}" / "eval.jsonl") if reference else []
    hit = next((e for e in evals if _reached(e, cfg.target)), None)
    final = evals[-1] if evals else {}

    faults = sorted((json.loads(p.read_text()) for p in run_dir.glob("peer*/fault.json")), key=lambda f: f["time"])
    fault = faults[0] | {"survived": outcome.status == "completed",
                         "run_ended_after_s": outcome.ended_at - faults[0]["time"]} if faults else None
    sent = _mean(s["bytes_sent"] for s in all_steps)
    recv = _mean(s["bytes_recv"] for s in all_steps)
    return {
        "status": outcome.status,
        "exit_code": outcome.exit_code,
        "error": outcome.error,
        "failed_rank": outcome.failed_rank,
        "lost_peers": outcome.lost_peers,
        "fault": fault,
        "config": config,
        "strategy_knobs": strategy_knobs or {},
        "data_is_synthetic": cfg.data.name == "synthetic",
        "network_scope": "per-peer namespace" if cfg.network.name != "loopback"
                         else "host-wide (shared by all peers, not attributable to one)",
        "wall_s": outcome.wall_s,
        "total_samples": total_samples,
        "throughput_samples_per_s": total_samples / longest if longest else None,
        "time_to_target_s": hit["train_s"] if hit else None,
        "steps_to_target": hit["step"] if hit else None,
        "target": OmegaConf.to_container(cfg.target),
        "final_test_accuracy": final.get("test_accuracy"),
        "final_test_loss": final.get("test_loss"),
        "time_breakdown_s": breakdown,
        "time_breakdown_share": shares,
        "bytes_sent_per_step": sent,
        "bytes_recv_per_step": recv,
        "bytes_sent_per_sample": sent / cfg.batch_size if sent is not None else None,
        "bytes_recv_per_sample": recv / cfg.batch_size if recv is not None else None,
        "network": network_section(config, peer_dirs, strategy_knobs or {}),
        "peers": peers,
        "methods": METHODS,
    }


def write_summary(run_dir: Path, config: dict, outcome, strategy_knobs: dict | None = None) -> dict:
    summary = build_summary(run_dir, config, outcome, strategy_knobs)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return summary
