"""summary.json: one run's figures from its peers' logs (partial logs too), defined once in METHODS."""
import json
import os
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from metrics.summary.isolation import METHODS as ISOLATION_METHODS, isolation_section, undilate, within_limit
from metrics.recording.jsonl import read_jsonl
from metrics.summary.link import METHODS as LINK_METHODS, link_section
from metrics.summary.machine import METHODS as MACHINE_METHODS, machine_section
from metrics.summary.network import METHODS as NETWORK_METHODS, network_section
from metrics.summary.bounds import LinkBound
from metrics.summary.noise_scale import METHODS as NOISE_SCALE_METHODS, noise_scale_section
from metrics.summary.rounds import rounds_section
from metrics.summary.schema import S, Evaluation, Isolation, Json, Peer, PeerWindow, Summary
from metrics.recording.rundir import PeerDir, RunDir
from metrics.summary.target import METHODS as TARGET_METHODS, samples_by_step, time_to_target
from metrics.recording.steplog import PHASES
from metrics.summary.wall import LaunchClock, nodes_wall_phases, wall_phases
from metrics.summary.window import steps_in, window_section, worker_window
from metrics.recording.methods import methods


METHODS = {**methods("summary"), **TARGET_METHODS, **MACHINE_METHODS, **NETWORK_METHODS, **LINK_METHODS,
           **ISOLATION_METHODS, **NOISE_SCALE_METHODS}
COUNTER_DELTAS = {"disk_read_bytes": "read_bytes", "disk_write_bytes": "write_bytes", "net_rx_bytes": "net_rx_bytes",
                  "net_tx_bytes": "net_tx_bytes", "lo_rx_bytes": "lo_rx_bytes", "lo_tx_bytes": "lo_tx_bytes"}


def speed_moved(seconds: list[float]) -> float:
    """Seconds a speed reference moved: its highest level held twice in a row less the lowest (fewer than 4: range)."""
    if len(seconds) < 4:
        return max(seconds) - min(seconds)
    pairs = list(zip(seconds, seconds[1:]))
    return max(0.0, max(min(pair) for pair in pairs) - min(max(pair) for pair in pairs))


def _mean(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def peer_figures(peer: PeerDir, window: tuple[int, int] | None = None) -> dict:
    steps = read_jsonl(peer.steps)
    evals = read_jsonl(peer.evals)
    resources = read_jsonl(peer.resources)
    figures = {
        "rank": peer.rank,
        "steps": steps[-1]["step"] if steps else 0,
        "samples": steps[-1]["samples"] if steps else 0,
        "train_s": steps[-1]["train_s"] if steps else 0.0,
        "window": worker_window(steps, window),
        "startup_wait_s": sum(s.get("startup_wait_s", 0.0) for s in steps),
        "final_eval": evals[-1] if evals else None,
        "result": json.loads(peer.result.read_text()) if peer.result.exists() else None,
        "error": peer.error.read_text() if peer.error.exists() else None,
        "wall_s_per_step": _mean(sum(s.get(phase, 0.0) for phase in PHASES) for s in steps),
        "cpu_s_per_step": _mean(s.get("cpu_s") for s in steps),
        "runq_s_per_step": _mean(s.get("runq_s") for s in steps),
    }
    if resources:
        first, last = resources[0], resources[-1]
        figures |= {"peak_rss_bytes": max(r["rss_bytes"] for r in resources),
                    "mean_cpu_percent": _mean(r["cpu_percent"] for r in resources[1:]) or resources[0]["cpu_percent"],
                    **{name: last[key] - first[key] for name, key in COUNTER_DELTAS.items()}}
    return figures


def useful_samples(workers: list[dict]) -> int | None:
    """Samples in the model the workers ended with, where the strategy says (hivemind: completed epochs x batch)."""
    found = [((w["result"] or {}).get("strategy") or {}).get("useful_samples") for w in workers]
    return max((v for v in found if v is not None), default=None)


def device_of(config: dict, workers: list[dict]) -> dict:
    results = [w["result"] for w in workers if w["result"]]
    return {"name": config.get("device", "cpu"),
            "gpus": sorted({r["device"] for r in results if r.get("device", "cpu") != "cpu"}),
            "gpu_shared": any(r.get("gpu_shared", False) for r in results)}


def worker_accuracy(evals_by_rank: dict[int, list[dict]]) -> dict:
    """Final accuracy over workers (mean, worst, best; see METHODS)."""
    finals = {rank: evals[-1] for rank, evals in evals_by_rank.items() if evals}
    over_workers = accuracy_over_workers({rank: e.get("test_accuracy") for rank, e in finals.items()})
    return {"accuracy_by_worker": over_workers, "final_test_accuracy": over_workers["worst"],
            "final_test_loss": max((e["test_loss"] for e in finals.values()), default=None)}


def accuracy_over_workers(accuracy: dict) -> dict:
    """summary.json accuracy_by_worker from each worker's final accuracy (rank -> accuracy or None)."""
    known = [a for a in accuracy.values() if a is not None]
    return {"mean": statistics.fmean(known) if known else None, "worst": min(known, default=None),
            "best": max(known, default=None), "by_rank": accuracy}


def step_shares(breakdown: dict, hidden: float | None) -> dict:
    """time_breakdown_share and hidden_comm_share from the mean step's phases and hidden communication."""
    step_total = sum(v or 0.0 for v in breakdown.values())
    return {"time_breakdown_share": {p: (v or 0.0) / step_total for p, v in breakdown.items()} if step_total else {},
            "hidden_comm_share": hidden / step_total if hidden is not None and step_total else None}


def evaluation_section(config: dict, workers: list[dict], evals_by_rank: dict[int, list[dict]],
                       steps_by_rank: dict[int, list[dict]]) -> dict:
    """How finely time-to-target is resolved, and what evaluating after training cost (see METHODS)."""
    results = [w["result"] for w in workers if w["result"]]
    interval = int(config.get("eval_every") or 0)
    sizes = {e["test_samples"] for evals in evals_by_rank.values() for e in evals if "test_samples" in e}
    return {
        "interval_steps": interval or None,
        "interval_samples": sum(samples_by_step(s)(interval) for s in steps_by_rank.values()) if interval else None,
        "test_samples": max(sizes) if sizes else None,
        "evaluations": max((r.get("evaluations", 0) for r in results), default=0),
        "after_training_s": max((r["eval_s"] for r in results if "eval_s" in r), default=None),
        "snapshot_pause_s": max((r["snapshot_s"] for r in results if "snapshot_s" in r), default=None),
        **evaluation_mode(results, config),
    }


def evaluation_mode(results: list[dict], config: dict) -> dict:
    """When the run evaluated (see METHODS["evaluation"]); a run without the record evaluated after training."""
    mode = next((r["evaluation"] for r in results if "evaluation" in r), {"mode": "after_training"})
    if mode["mode"] != "in_training":
        return mode
    return mode | {"in_training_s": max(r.get("in_training_eval_s", 0.0) for r in results),
                   "confirm_after_steps": config.get("eval_confirm_after"),
                   "stopped_at_target": all(r.get("stopped_at_target") for r in results)}


def speed_reference_section(config: dict, figures: list[dict]) -> dict | None:
    """The workers' speed references and how far each moved in the run (see METHODS); None where none was recorded."""
    by_rank = {}
    for peer in figures:
        recorded = (peer["result"] or {}).get("speed_reference") or {}
        seconds = [m["seconds"] for m in recorded.get("measurements") or []]
        if not seconds:
            continue
        median = statistics.median(seconds)
        wall = recorded["measurements"][-1]["wall_s"]
        by_rank[peer["rank"]] = {"median_s": median, "moved": speed_moved(seconds) / median,
                                 "measurements": len(seconds), "cost_s": recorded["cost_s"],
                                 "cost_share": recorded["cost_s"] / wall if wall else None,
                                 "work": {k: recorded.get(k) for k in ("samples", "threads", "dtype", "device")}}
    if not by_rank:
        return None
    tolerance = float(config["speed_reference"]["tolerance"])
    moved = max(r["moved"] for r in by_rank.values())
    return {"median_s": statistics.median(r["median_s"] for r in by_rank.values()), "moved": moved,
            "tolerance": tolerance, "beyond_tolerance": moved > tolerance,
            "cost_share": largest(r["cost_share"] for r in by_rank.values()),
            "work": next(iter(by_rank.values()))["work"], "by_rank": by_rank}


@dataclass(frozen=True)
class StrategyFacts:
    link: LinkBound = field(default_factory=LinkBound)
    is_baseline: bool = False
    failure_counters: tuple[str, ...] = ()
    synchronous: bool = True


@dataclass(frozen=True)
class LaunchFacts:
    """The launch side: shape, lock (the machine lock at the start), window ((first, last) step measured; None: all),
    clock (its steps' times, for wall_phases_s; None: not recorded)."""
    shape: dict | None = None
    lock: dict | None = None
    window: tuple[int, int] | None = None
    clock: LaunchClock | None = None


class Outcome(Protocol):  # how the run ended, as build_summary reads launchers/base.py's Outcome
    status: str
    exit_code: int
    wall_s: float
    failed_rank: int | None
    error: str | None
    lost_peers: list[int]
    ended_at: float


def build_summary(run: RunDir, config: dict, outcome: Outcome, strategy: StrategyFacts = StrategyFacts(),
                  launch: LaunchFacts = LaunchFacts()) -> Summary:
    peers, shape = run.peers(), launch.shape or {}
    figures = [peer_figures(p, launch.window) for p in peers]
    worker_dirs = [p for p in peers if p.steps.exists()]
    workers = [f for f, p in zip(figures, peers) if p.steps.exists()]
    steps_by_rank = {p.rank: read_jsonl(p.steps) for p in worker_dirs}
    all_steps = [s for steps in steps_by_rank.values() for s in steps_in(steps, launch.window)[0]]  # the window's
    window_samples = sum(w["window"]["samples"] for w in workers)
    longest = max((w["window"]["train_s"] for w in workers), default=0.0)

    breakdown = {phase: _mean(s.get(phase, 0.0) for s in all_steps) for phase in PHASES}
    hidden = _mean(s.get("hidden_comm_s", 0.0) for s in all_steps)
    shares = step_shares(breakdown, hidden)

    faults = sorted((json.loads(p.fault.read_text()) for p in peers if p.fault.exists()), key=lambda f: f["time"])
    fault = faults[0] | {"survived": outcome.status == "completed",
                         "run_ended_after_s": outcome.ended_at - faults[0]["time"]} if faults else None
    evals_by_rank = {p.rank: read_jsonl(p.evals) for p in worker_dirs}
    accuracy = worker_accuracy(evals_by_rank) | time_to_target(
        evals_by_rank, steps_by_rank, {p.rank: p.eval_samples for p in worker_dirs}, config["target"])
    isolation = isolation_section(run, {f["rank"]: f["result"] for f in figures}, shape.get("fits", True),
                                  {rank: steps_in(steps, launch.window)[0] for rank, steps in steps_by_rank.items()},
                                  strategy.synchronous)
    found = {
        "status": outcome.status,
        "exit_code": outcome.exit_code,
        "error": outcome.error,
        "failed_rank": outcome.failed_rank,
        "lost_peers": outcome.lost_peers,
        "fault": fault,
        "config": config,
        "strategy_knobs": strategy.link.knobs,
        "is_baseline": strategy.is_baseline,
        "failure_counters": list(strategy.failure_counters),
        "workers": len(workers),
        "device": device_of(config, workers),
        "data_is_synthetic": config["data"]["name"] == "synthetic",
        "network_scope": "per-peer namespace" if run.network.exists()
                         else "host-wide (shared by all peers, not attributable to one)",
        "started_at": outcome.ended_at - outcome.wall_s,
        "wall_s": outcome.wall_s,
        "wall_phases_s": None,
        "total_samples": sum(w["samples"] for w in workers),
        "useful_samples": useful_samples(workers),
        "startup_wait_s": max((w["startup_wait_s"] for w in workers), default=None),
        "window": window_section(launch.window, steps_by_rank),
        "throughput_samples_per_s": window_samples / longest if longest else None,
        **accuracy,
        "target": config["target"],
        "evaluation": evaluation_section(config, workers, evals_by_rank, steps_by_rank),
        "effective_lr": next((w["result"]["effective_lr"] for w in workers
                              if w["result"] and "effective_lr" in w["result"]), None),
        "time_breakdown_s": breakdown,
        "time_breakdown_share": shares["time_breakdown_share"],
        "hidden_comm_s": hidden,
        "hidden_comm_share": shares["hidden_comm_share"],
        "bytes_sent_per_step": _mean(s["bytes_sent"] for s in all_steps),
        "bytes_recv_per_step": _mean(s["bytes_recv"] for s in all_steps),
        "bytes_sent_per_sample": sum(s["bytes_sent"] for s in all_steps) / window_samples if window_samples else None,
        "bytes_recv_per_sample": sum(s["bytes_recv"] for s in all_steps) / window_samples if window_samples else None,
        "averaging_rounds": rounds_section(run, len(workers)),
        "noise_scale": noise_scale_section(steps_by_rank),
        "network": network_section(run, config, strategy.link),
        "link": link_section(run, config),
        "shape": launch.shape,
        "machine": machine_section(run.machine, shape.get("cores") or len(os.sched_getaffinity(0)), launch.lock),
        "isolation": isolation,
        "speed_reference": speed_reference_section(config, figures),
        "peers": figures,
        "methods": METHODS,
    }
    found["wall_phases_s"] = wall_phases(launch.clock, outcome.ended_at, workers) if launch.clock else None  # last
    return Summary.from_dict(undilate(found, isolation["dilation"]))


def write_summary(run: RunDir, config: dict, outcome: Outcome, strategy: StrategyFacts = StrategyFacts(),
                  launch: LaunchFacts = LaunchFacts()) -> Summary:
    summary = build_summary(run, config, outcome, strategy, launch)
    summary.save(run.summary)
    return summary

WORST_LAST = ("completed", "interrupted", "failed")  # a status not listed counts as failed
NO_SUMMARY = "wrote no summary.json (its launcher was stopped or its node lost: see the job's SLURM logs)"


def merge_nodes(paths: list[Path], summaries: list[Summary], ranks: list[int], missing: list[int]) -> Summary:
    """One summary of a run over several nodes (missing: node ranks that wrote none), as docs/clusters.md defines."""
    first = summaries[0]
    peers = sorted((p for s in summaries for p in s.peers or []), key=lambda p: p.rank)
    windows = windows_of(peers)
    longest = max((w.train_s for w in windows), default=0.0)
    steps = [sum(w.steps for w in windows_of(s.peers or [])) for s in summaries]  # its means' weight
    samples = [sum(w.samples for w in windows_of(s.peers or [])) for s in summaries]
    breakdown = {phase: weighted([((s.time_breakdown_s or {}).get(phase), w) for s, w in zip(summaries, steps)])
                 for phase in (first.time_breakdown_s or {})}
    hidden = weighted([(s.hidden_comm_s, w) for s, w in zip(summaries, steps)])
    shape = worst_of([s.shape for s in summaries], lambda s: s.oversubscription or 0)
    return Summary.from_dict((first.to_dict() or {}) | nodes_outcome(paths, summaries, ranks, missing) | {
        "peers": [p.to_dict() for p in peers],
        "workers": sum(s.workers or 0 for s in summaries),
        "total_samples": sum(s.total_samples or 0 for s in summaries),
        "throughput_samples_per_s": sum(w.samples for w in windows) / longest if longest else None,
        "useful_samples": largest(s.useful_samples for s in summaries),
        "wall_phases_s": nodes_wall_phases(summaries),
        "startup_wait_s": largest(s.startup_wait_s for s in summaries),
        "time_breakdown_s": breakdown,
        "hidden_comm_s": hidden,
        **step_shares(breakdown, hidden),
        "bytes_sent_per_step": weighted([(s.bytes_sent_per_step, w) for s, w in zip(summaries, steps)]),
        "bytes_recv_per_step": weighted([(s.bytes_recv_per_step, w) for s, w in zip(summaries, steps)]),
        "bytes_sent_per_sample": weighted([(s.bytes_sent_per_sample, n) for s, n in zip(summaries, samples)]),
        "bytes_recv_per_sample": weighted([(s.bytes_recv_per_sample, n) for s, n in zip(summaries, samples)]),
        **nodes_learning_curves(paths, summaries),
        "evaluation": nodes_evaluation([s.evaluation for s in summaries]),
        "device": (first.device.to_dict() or {}) | {"gpus": sorted({g for s in summaries for g in s.device.gpus or []}),
                                                    "gpu_shared": any(s.device.gpu_shared for s in summaries)},
        "isolation": nodes_isolation([s.isolation for s in summaries]),
        "shape": shape | {"hosts": [s.shape.host for s in summaries]} if shape else None,
        "machine": worst_of([s.machine for s in summaries], lambda m: (m.alone is False, m.other_cpu_share or 0)),
        "link": worst_of([s.link for s in summaries], lambda link: link.faithful is False) or first.link.to_dict(),
    })


def nodes_outcome(paths: list[Path], summaries: list[Summary], ranks: list[int], missing: list[int]) -> dict:
    """Status, error, exit code, failed rank, lost peers, fault and times of the run; each node's own in `nodes`."""
    listed: list[Json] = [{"node_rank": rank, "host": s.shape.host, "path": str(path), "status": s.status,
                           "error": s.error} for rank, path, s in zip(ranks, paths, summaries)]
    listed += [{"node_rank": rank, "host": None, "path": None, "status": None,
                "error": f"node rank {rank} {NO_SUMMARY}"} for rank in missing]
    ended = [(s.started_at or 0) + (s.wall_s or 0) for s in summaries]
    found: Json = {"nodes": sorted(listed, key=lambda n: n["node_rank"]),
             "status": max((s.status for s in summaries), key=severity) if not missing else "failed",
             "started_at": min(s.started_at or 0 for s in summaries),
             "lost_peers": sorted({r for s in summaries for r in s.lost_peers or []})}
    found["wall_s"] = max(ended) - found["started_at"]
    faults = sorted((s.fault for s in summaries if s.fault), key=lambda f: f.time or 0)
    found["fault"] = faults[0].to_dict() if faults else None
    failed = sorted(((end, s) for end, s in zip(ended, summaries) if s.status != "completed"), key=lambda f: f[0])
    if failed:
        cause = failed[0][1]
        found |= {"error": cause.error, "exit_code": cause.exit_code, "failed_rank": cause.failed_rank}
    elif missing:
        found |= {"error": f"node rank {', '.join(map(str, missing))} {NO_SUMMARY}", "exit_code": None,
                  "failed_rank": None}
    return found


def nodes_learning_curves(paths: list[Path], summaries: list[Summary]) -> dict:
    """Time-to-target by the worst worker of every node (seconds as each node's summary converted them); accuracy."""
    workers = [(peer, steps) for path in paths for peer in RunDir(path).peers() if (steps := read_jsonl(peer.steps))]
    found = time_to_target({p.rank: read_jsonl(p.evals) for p, _ in workers}, {p.rank: s for p, s in workers},
                           {p.rank: p.eval_samples for p, _ in workers}, summaries[0].target)
    crossed = {rank: t for s in summaries for rank, t in (s.time_to_target_by_rank or {}).items()}
    samples = found["samples_to_target"]
    worst = max(crossed.values()) if samples is not None and crossed and None not in crossed.values() else None
    accuracy = accuracy_over_workers(
        {rank: a for s in summaries for rank, a in (s.accuracy_by_worker.by_rank or {}).items()})
    return found | {"time_to_target_by_rank": crossed, "time_to_target_s": worst,
                    "time_per_sample_s": worst / samples if worst is not None and samples else None,
                    "accuracy_by_worker": accuracy, "final_test_accuracy": accuracy["worst"],
                    "final_test_loss": largest(s.final_test_loss for s in summaries)}


def nodes_evaluation(found: list[Evaluation]) -> dict:
    return (found[0].to_dict() or {}) | {
        "interval_samples": total(e.interval_samples for e in found),
        "test_samples": largest(e.test_samples for e in found),
        "evaluations": largest(e.evaluations for e in found),
        "after_training_s": largest(e.after_training_s for e in found),
        "snapshot_pause_s": largest(e.snapshot_pause_s for e in found)}


def nodes_isolation(found: list[Isolation]) -> dict:
    """Every node's ranks; isolated where every node was, faithful where every node measured it so."""
    apart = next((i for i in found if i.status != "isolated"), found[0])
    faithful, moved = [i.faithful for i in found], largest(i.distortion for i in found)
    return (found[0].to_dict() or {}) | {
        "status": apart.status, "reason": apart.reason,
        "distortion": moved, "distortion_within_limit": within_limit(moved),
        "faithful": False if False in faithful else None if None in faithful else True,
        "unfaithful": [why for i in found for why in i.unfaithful or []],
        "by_rank": [row for i in found for row in i.by_rank or []]}


def worst_of(sections: list[S], badness: Callable[[S], float | tuple[bool, float]]) -> dict | None:
    """The section of the node worst off by badness(section) (the first node's on a tie); None where no node has it."""
    found = [s for s in sections if s]
    return max(found, key=badness).to_dict() if found else None


def severity(status: str | None) -> int:
    return WORST_LAST.index(status) if status in WORST_LAST else len(WORST_LAST)


def windows_of(peers: list[Peer]) -> list[PeerWindow]:
    """Each peer's samples, training time and steps in the measurement window (all its steps in an older summary)."""
    return [p.window or PeerWindow(samples=p.samples or 0, train_s=p.train_s or 0.0, steps=p.steps or 0)
            for p in peers if p.train_s is not None]


def weighted(pairs: list[tuple]) -> float | None:
    """The mean of values weighted by their weights (pairs without a value or weight left out)."""
    known = [(v, w) for v, w in pairs if v is not None and w]
    return sum(v * w for v, w in known) / sum(w for _, w in known) if known else None


def largest(values: Iterable[float | None]) -> float | None:
    return max((v for v in values if v is not None), default=None)


def total(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None
