"""summary.json: one run's figures, computed from the per-peer logs after the run.

Works on partial logs too (a crashed run keeps what it wrote). Every figure has one
definition for all strategies, stated in METHODS and written into the summary.
"""
import json
import os
import statistics

from metrics.summary.isolation import METHODS as ISOLATION_METHODS
from metrics.summary.isolation import isolation_section, undilate
from metrics.recording.jsonl import read_jsonl
from metrics.summary.link import METHODS as LINK_METHODS
from metrics.summary.link import link_section
from metrics.summary.machine import METHODS as MACHINE_METHODS
from metrics.summary.machine import machine_section
from metrics.summary.network import METHODS as NETWORK_METHODS
from metrics.summary.network import network_section
from metrics.summary.noise_scale import METHODS as NOISE_SCALE_METHODS
from metrics.summary.noise_scale import noise_scale_section
from metrics.summary.rounds import rounds_section
from metrics.summary.schema import Summary
from metrics.recording.rundir import PeerDir, RunDir
from metrics.summary.target import METHODS as TARGET_METHODS
from metrics.summary.target import samples_by_step, time_to_target
from metrics.recording.steplog import PHASES
from metrics.summary.window import METHOD as WINDOW_METHOD
from metrics.summary.window import steps_in, window_section, worker_window


METHODS = {
    "started_at": "unix time (s) the launcher started the run: the time its outcome was decided minus wall_s "
                  "(a multirun's order of runs, blocks interleaved, shows in runs.csv)",
    "window": WINDOW_METHOD,
    "throughput_samples_per_s": "over the measurement window (window): all workers' samples trained in it / the "
                                "longest worker's training time in it: its wall time from the end of the step before "
                                "the window to the end of the window's last step (which holds its last "
                                "communication, e.g. an averaging round), minus its pauses to save weights for "
                                "evaluation and to time its speed reference, and minus start-up waits inside a step (startup_wait_s: hivemind's wait in its "
                                "first step until its progress tracker sees every peer)",
    "useful_samples": "samples that went into the model the workers ended with, where the strategy says so "
                      "(hivemind: completed epochs x target_batch_size, as trained samples past the last epoch "
                      "boundary never reach it); null for strategies where every trained sample counts",
    "startup_wait_s": "the longest worker's start-up wait inside its steps (not training time: left out of train_s "
                      "and of the step's phases)",
    "averaging_rounds": "see metrics/summary/rounds.py METHOD (null: the strategy records no rounds one by one)",
    "time_breakdown_s": "mean per step over all workers' steps in the measurement window (perf_counter), the same for every strategy: data_s = "
                        "fetching the batch; compute_s = forward and backward up to the moment the last gradient "
                        "was accumulated, less compute_wait_s: the training thread's wait for a CPU in that span "
                        "(schedstat), at most the CPU time the peer's other threads used meanwhile (its "
                        "communication threads on its own cores: communication's CPU cost, booked as exposed "
                        "communication; waits for other processes or a quota stay in compute); on a GPU the "
                        "kernels' CUDA-event time; opt_s = the optimizer update wherever it runs (a parameter server's "
                        "update, as its reply reports it; hivemind's global step inside an averaging step); "
                        "comm_s = exposed communication = step wall - data - compute - opt (waiting for other "
                        "peers and compute_wait_s included). These four sum to the step. hidden_comm_s, apart: link time the "
                        "strategy measured beyond the exposed part (link_s - comm_s), i.e. communication that "
                        "ran behind compute (DDP's buckets, Horovod's all-reduces during backward); not in the sum",
    "bytes_per_step": "payload accounting: bytes of the tensors the strategy exchanged per worker per step, from "
                      "exact accounting in its send path (for library collectives, which move bytes themselves: every tensor handed "
                      "to the library is counted, per step collective_bytes = S, and bytes_* are the ring's 2(N-1)/N "
                      "x S per worker link and direction); no protocol headers; mean over all workers' steps in the "
                      "measurement window. Per sample: all workers' payload bytes / all workers' samples in it. Wire measurements are under "
                      "network.wire (network=emulated only)",
    "accuracy_by_worker": "every worker evaluates its own model (BatchNorm statistics recomputed: precise_bn_samples) "
                          "on the whole held-out split at the same steps; "
                          "mean, worst and best over workers of their last evaluation. final_test_accuracy and "
                          "final_test_loss are the worst worker's",
    "evaluation": "evaluations are of weights saved during training (every eval_every steps, at step 0 and at the "
                  "last step), run after the worker's training ended: interval_steps and interval_samples (all "
                  "workers' samples between two evaluations) and test_samples (held-out split; one sample = "
                  "1/test_samples of accuracy) are the time-to-target resolution; after_training_s = the longest "
                  "worker's evaluation time after training (in wall_s, not in any training time); "
                  "snapshot_pause_s = the longest worker's summed pauses to save weights (left out of train_s). "
                  "mode: after_training, or in_training (eval_in_training: each snapshot evaluated when taken, "
                  "within the pause; in_training_s = the longest worker's summed evaluation time, also left out of "
                  "train_s; stopped_at_target = every worker ended at the step where target.estimator confirmed the "
                  "crossing, not at max_steps); why: where eval_in_training was asked but the strategy evaluates "
                  "after training",
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
    "shape": "the run's shape against this host: processes (of this run on this host) x threads each = cpus_asked "
             "(divided by emulate.dilation where set), cores = usable cores (os.sched_getaffinity), "
             "oversubscription = cpus_asked / cores, fits = cpus_asked <= cores; peers_default = peers came from "
             "the strategy's default (the most peers, at least 2 and up to 4, whose CPUs fit the cores); host = this "
             "host's name (gethostname), node_rank of nnodes = its place in a run over several hosts (each writes "
             "its own summary, of its own peers)",
    "speed_reference": "the machine's speed (job/speed_reference.py): seconds of one forward and backward of a fixed "
                       "copy of the initial model on a fixed batch (samples, threads, dtype, device: the work), the "
                       "median of `repetitions` timings, each of `passes` passes in a row (as many as last 20 ms at the first "
                       "measurement: job/speed_reference.py), timed by each worker with the training clock stopped at "
                       "step 0, at evaluation pauses within max_share of the time since training started, and after "
                       "the last step (peers[].result.speed_reference.measurements: step, wall_s since training "
                       "started, at = unix time at its start, seconds, pause_s). Per rank: median_s of its "
                       "measurements, moved = (second slowest - second fastest) / median_s with 4 or more "
                       "measurements (a lone far-out measurement is a blip, not a move), else (slowest - fastest) / "
                       "median_s, cost_s = its summed pauses, cost_share = cost_s / the wall time from training's start to its last measurement; the run: median_s "
                       "over its workers' medians, moved and cost_share the worst rank's, beyond_tolerance = moved > "
                       "tolerance. Parameter servers have no model and record none",
    **TARGET_METHODS,
    **MACHINE_METHODS,
    **NETWORK_METHODS,
    **LINK_METHODS,
    **ISOLATION_METHODS,
    **NOISE_SCALE_METHODS,
}


def speed_moved(seconds: list[float]) -> float:
    """How far a speed reference moved, in seconds. With 4 or more measurements, a move is a level held for two
    measurements in a row: the highest such level less the lowest (0 where none stands apart); a lone far-out
    measurement is a blip, however many there are. With fewer, the range of the measurements."""
    if len(seconds) < 4:
        return max(seconds) - min(seconds)
    pairs = list(zip(seconds, seconds[1:]))
    return max(0.0, max(min(pair) for pair in pairs) - min(max(pair) for pair in pairs))


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


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
        "wall_s_per_step": _mean(sum(s[phase] for phase in PHASES) for s in steps),
        "cpu_s_per_step": _mean(s.get("cpu_s") for s in steps),
        "runq_s_per_step": _mean(s.get("runq_s") for s in steps),
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


def useful_samples(workers: list[dict]) -> int | None:
    """Samples that went into the model the workers ended with, where the strategy says (hivemind: its epochs x
    target batch size): trained samples past the last completed epoch did not."""
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
        **evaluation_mode(results),
    }


def evaluation_mode(results: list[dict]) -> dict:
    """When the run evaluated (see METHODS["evaluation"]); a run without the record evaluated after training."""
    mode = next((r["evaluation"] for r in results if "evaluation" in r), {"mode": "after_training"})
    if mode["mode"] != "in_training":
        return mode
    return mode | {"in_training_s": max(r.get("in_training_eval_s", 0.0) for r in results),
                   "stopped_at_target": all(r.get("stopped_at_target") for r in results)}


def speed_reference_section(config: dict, figures: list[dict]) -> dict | None:
    """The workers' speed references and how far each moved during the run (see METHODS); None where none was
    recorded."""
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
            "cost_share": max((r["cost_share"] for r in by_rank.values() if r["cost_share"] is not None),
                              default=None),
            "work": next(iter(by_rank.values()))["work"], "by_rank": by_rank}


def build_summary(run: RunDir, config: dict, outcome, knobs: dict | None = None, bound=None,
                  bound_formula: str | None = None, is_baseline: bool = False, rounds_overlap: bool = False,
                  failure_counters: tuple[str, ...] = (), shape: dict | None = None, lock: dict | None = None,
                  window: tuple[int, int] | None = None) -> Summary:
    """knobs, bound (a function of metrics.summary.bounds.Round), bound_formula, is_baseline (a single-process
    run that others are compared with), rounds_overlap and failure_counters (the keys of its peers'
    figures that count failures) come from the run's strategy; shape (the run against this host's
    cores) and lock (the machine lock at the start) from the launch side; window (first, last step: the measurement
    window, metrics/summary/window.py) from the config and the strategy (None: all steps)."""
    peers = run.peers()
    figures = [peer_figures(p, window) for p in peers]
    worker_dirs = [p for p in peers if p.steps.exists()]
    workers = [f for f, p in zip(figures, peers) if p.steps.exists()]
    steps_by_rank = {p.rank: read_jsonl(p.steps) for p in worker_dirs}
    all_steps = [s for steps in steps_by_rank.values() for s in steps_in(steps, window)[0]]  # the window's
    total_samples = sum(w["samples"] for w in workers)
    window_samples = sum(w["window"]["samples"] for w in workers)
    longest = max((w["window"]["train_s"] for w in workers), default=0.0)

    breakdown = {phase: _mean(s[phase] for s in all_steps) for phase in PHASES}
    hidden = _mean(s.get("hidden_comm_s", 0.0) for s in all_steps)
    shares = step_shares(breakdown, hidden)

    faults = sorted((json.loads(p.fault.read_text()) for p in peers if p.fault.exists()), key=lambda f: f["time"])
    fault = faults[0] | {"survived": outcome.status == "completed",
                         "run_ended_after_s": outcome.ended_at - faults[0]["time"]} if faults else None
    sent = _mean(s["bytes_sent"] for s in all_steps)
    recv = _mean(s["bytes_recv"] for s in all_steps)
    evals_by_rank = {p.rank: read_jsonl(p.evals) for p in worker_dirs}
    accuracy = worker_accuracy(evals_by_rank) | time_to_target(
        evals_by_rank, steps_by_rank, {p.rank: p.eval_samples for p in worker_dirs}, config["target"])
    isolation = isolation_section(run, {f["rank"]: f["result"] for f in figures}, (shape or {}).get("fits", True))
    return Summary.from_dict(undilate({
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
        "started_at": outcome.ended_at - outcome.wall_s,
        "wall_s": outcome.wall_s,
        "total_samples": total_samples,
        "useful_samples": useful_samples(workers),
        "startup_wait_s": max((w["startup_wait_s"] for w in workers), default=None),
        "window": window_section(window, steps_by_rank),
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
        "bytes_sent_per_step": sent,
        "bytes_recv_per_step": recv,
        "bytes_sent_per_sample": sum(s["bytes_sent"] for s in all_steps) / window_samples if window_samples else None,
        "bytes_recv_per_sample": sum(s["bytes_recv"] for s in all_steps) / window_samples if window_samples else None,
        "averaging_rounds": rounds_section(run, len(workers)),
        "noise_scale": noise_scale_section(steps_by_rank),
        "network": network_section(run, config, knobs or {}, bound, bound_formula, rounds_overlap),
        "link": link_section(run, config),
        "shape": shape,
        "machine": machine_section(run.machine, (shape or {}).get("cores") or len(os.sched_getaffinity(0)), lock),
        "isolation": isolation,
        "speed_reference": speed_reference_section(config, figures),
        "peers": figures,
        "methods": METHODS,
    }, isolation["dilation"]))


def write_summary(run: RunDir, config: dict, outcome, knobs: dict | None = None, bound=None,
                  bound_formula: str | None = None, is_baseline: bool = False, rounds_overlap: bool = False,
                  failure_counters: tuple[str, ...] = (), shape: dict | None = None, lock: dict | None = None,
                  window: tuple[int, int] | None = None) -> Summary:
    summary = build_summary(run, config, outcome, knobs, bound, bound_formula, is_baseline, rounds_overlap,
                            failure_counters, shape, lock, window)
    summary.save(run.summary)
    return summary
