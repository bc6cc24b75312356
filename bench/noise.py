"""Where the noise comes from: a pinned single process and a 2-peer run, repeated and interleaved, their
variance attributed to CPU time, run-queue delay and the rest."""
import argparse
import statistics
import sys
import threading
import time
from typing import Any

from bench.jobs import train
from metrics.recording.jsonl import read_jsonl
from metrics.recording.machine import ProcessClock
from metrics.recording.rundir import RunDir
from metrics.recording.steplog import PHASES
from metrics.summary.schema import Summary

ARMS = {"single_1x1": ["strategy=single", "peers=1"], "stepwise_2x1": ["strategy=stepwise", "peers=2"]}
JOB = ["model=resnet18", "max_steps=40", "eval_every=0"]
WARMUP = 5
REPEATS = 4  # alternations of the arms (--noise-repeats)
PARTS = ("cpu_s", "runq_s", "other_s")
MACHINE = ("cpu_pressure_share", "steal_share", "load_mean", "other_cpu_share")


def step_parts(step: dict[str, Any]) -> dict[str, float]:
    wall = sum(step.get(p, 0.0) for p in PHASES)
    return {"wall_s": wall, "cpu_s": step["cpu_s"], "runq_s": step["runq_s"],
            "other_s": wall - step["cpu_s"] - step["runq_s"]}


def measure(overrides: list[str]) -> tuple[dict[str, Any], list[dict[str, float]]]:
    """One run: its figures, and its steps' parts about each worker's mean (for the step-to-step shares)."""
    with train(*overrides, *JOB) as run_dir:
        run = RunDir(run_dir)
        summary = Summary.load(run.summary)
        workers = [[step_parts(s) for s in read_jsonl(peer.steps)[WARMUP:]] for peer in run.peers()]
    steps = [s for worker in workers for s in worker]
    figures: dict[str, Any] = {key: statistics.fmean(s[key] for s in steps) for key in ("wall_s", *PARTS)}
    deviations = []
    for worker in workers:
        means = {key: statistics.fmean(s[key] for s in worker) for key in ("wall_s", *PARTS)}
        deviations += [{key: s[key] - means[key] for key in means} for s in worker]
    machine = summary.machine
    figures |= {"samples_per_s": summary.throughput_samples_per_s, "alone": machine.alone,
                **{key: getattr(machine, key) for key in MACHINE}}
    return figures, deviations


def spread(values: list[float]) -> dict[str, float | None]:
    mean = statistics.fmean(values)
    return {"min": min(values), "max": max(values), "spread": (max(values) - min(values)) / mean,
            "cv": statistics.stdev(values) / mean if len(values) > 1 else None}


def shares(rows: list[dict[str, Any]]) -> dict[str, float] | None:
    """cov(wall, part) / var(wall) per part; they sum to 1 (wall = cpu + runq + other)."""
    walls = [r["wall_s"] for r in rows]
    if len(rows) < 2 or (var := statistics.variance(walls)) == 0:
        return None
    return {part: statistics.covariance(walls, [r[part] for r in rows]) / var for part in PARTS}


def correlation(xs: list[float], ys: list[float]) -> float | None:
    try:
        return statistics.correlation(xs, ys)
    except statistics.StatisticsError:  # a constant factor (e.g. no steal at all)
        return None


def clock_cost_us(threads: int = 6, reps: int = 2000) -> float:
    idle = threading.Event()
    extra = [threading.Thread(target=idle.wait, daemon=True) for _ in range(threads - threading.active_count())]
    for thread in extra:
        thread.start()
    clock, costs = ProcessClock(), []
    for _ in range(reps):
        t0 = time.perf_counter()
        clock.start()
        clock.since_start()
        costs.append(time.perf_counter() - t0)
    idle.set()
    return 1e6 * statistics.median(costs)


def report(arms: dict[str, dict[str, Any]], correlations: dict[str, float | None]) -> None:
    for name, arm in arms.items():
        print(f"\n{name}: {len(arm['runs'])} runs, wall s/step " + " ".join(f"{r['wall_s']:.3f}" for r in arm["runs"]))
        for key in ("wall_s", *PARTS, "samples_per_s", *MACHINE):
            s = arm["spread"][key]
            print(f"  {key:<20} {s['min']:9.4f} .. {s['max']:9.4f}  spread {s['spread']:7.1%}")
        for kind in ("between_runs", "within_runs"):
            found = arm[f"{kind}_shares"]
            print(f"  shares of {kind:<13} variance of wall: " +
                  (", ".join(f"{k[:-2]} {v:+.2f}" for k, v in found.items()) if found else "n/a"))
    print("correlation of relative wall time per step with: " +
          ", ".join(f"{k} {'n/a' if v is None else f'{v:+.2f}'}" for k, v in correlations.items()))


def add_arguments(parser: argparse._ActionsContainer) -> None:
    parser.add_argument("--noise-repeats", type=int, metavar="N",
                        help=f"alternations of the two arms (default {REPEATS})")


def run(repeats: int = REPEATS) -> dict[str, Any]:
    started = time.monotonic()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in ARMS}
    steps: dict[str, list[dict[str, float]]] = {name: [] for name in ARMS}
    for repeat in range(repeats):
        for name, overrides in ARMS.items():  # interleaved: each block has one run of every arm
            print(f"noise: repeat {repeat + 1}/{repeats}, {name}", file=sys.stderr, flush=True)
            figures, deviations = measure(overrides)
            runs[name].append(figures)
            steps[name] += deviations
    arms: dict[str, dict[str, Any]] = {}
    relative: list[float] = []
    factors: dict[str, list[float]] = {key: [] for key in MACHINE}
    for name, rows in runs.items():
        arms[name] = {"runs": rows,
                      "spread": {key: spread([r[key] for r in rows])
                                 for key in ("wall_s", *PARTS, "samples_per_s", *MACHINE)},
                      "between_runs_shares": shares(rows), "within_runs_shares": shares(steps[name])}
        mean_wall = statistics.fmean(r["wall_s"] for r in rows)
        relative += [r["wall_s"] / mean_wall for r in rows]
        for key in MACHINE:
            factors[key] += [r[key] for r in rows]
    correlations = {key: correlation(relative, values) for key, values in factors.items()}
    report(arms, correlations)
    return {
        "name": "noise",
        "ratio": arms["single_1x1"]["spread"]["wall_s"]["spread"],
        "goal": "<= 0.05 (quiet)",
        "setup": f"{' / '.join(' '.join(a) for a in ARMS.values())}, {' '.join(JOB)}, {repeats} interleaved repeats, "
                 f"steps {WARMUP + 1}.. ; ratio = run-to-run spread of the single process's wall time per step",
        "arms": arms,
        "machine_correlation": correlations,
        "clock_cost_us": clock_cost_us(),
        "duration_s": time.monotonic() - started,
    }
