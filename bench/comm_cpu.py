"""Communication's cost apart from compute: each engine's time and CPU per step by payload on its real path, on
loopback (a wire that costs nothing), and whether one process's compute plus that cost predicts the step."""
import math
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

from bench.jobs import averaging_strategies, grid_settings, ints, train
from metrics.recording.jsonl import read_jsonl
from metrics.recording.rundir import RunDir
from metrics.summary.schema import Summary

DEFAULT_GRID = "strategies=allreduce,ring,stepwise,ps fit_widths=320,1200,2400,3200 held_out_widths=864,1728 " \
               "steps=40 max_steps=1000 warmup=5 repeats=3"
STRATEGIES = averaging_strategies("comm_cpu")
TOLERANCE = 0.10  # the predicted step against the measured one
MB = 1e6


def worker_figures(run: Path, warmup: int) -> dict[str, float]:
    """Means over the workers' steps after `warmup`: cpu_s (the process's CPU, all threads), step_s (data, compute,
    communication and update), bytes (the payload sent and received, exact accounting)."""
    per_worker = []
    for peer in RunDir(run).peers():
        steps = [s for s in read_jsonl(peer.steps) if s["step"] > warmup] if peer.steps.exists() else []
        if steps:
            per_worker.append({
                "cpu_s": statistics.fmean(s["cpu_s"] for s in steps),
                "step_s": statistics.fmean(s["data_s"] + s["compute_s"] + s["comm_s"] + s["opt_s"] for s in steps),
                "bytes": statistics.fmean(s["bytes_sent"] + s["bytes_recv"] for s in steps)})
    if not per_worker:
        raise RuntimeError(f"{run}: no worker logged a step after step {warmup}")
    return {key: statistics.fmean(w[key] for w in per_worker) for key in per_worker[0]}


def measure(strategy: str, width: int, steps: int, warmup: int) -> dict[str, Any]:
    """One compute-free run on loopback: `single` on one process, an averaging strategy on two."""
    shape = ["strategy=single", "peers=1"] if strategy == "single" else [*STRATEGIES[strategy], "peers=2"]
    with train(*shape, "peer_cpus=1", "network=loopback", "model=mlp", f"model.width={width}",
               f"max_steps={steps}", "eval_every=0") as run:
        summary = Summary.load(RunDir(run).summary)
        figures = worker_figures(run, warmup)
    print(f"comm_cpu: {strategy} width {width}: {figures['cpu_s'] * 1e3:.1f} ms CPU, {figures['step_s'] * 1e3:.1f} ms "
          f"a step, {figures['bytes'] / MB:.2f} MB", file=sys.stderr, flush=True)
    return {"strategy": strategy, "width": width, **figures, "faithful": summary.isolation.faithful is not False}


def steps_for(width: int, widest: int, steps: int, most: int) -> int:
    """Steps of a run at this width: `steps` at the widest, more at narrower widths in proportion to the work a step
    saves (width squared), at most `most`, so that a narrow run's steps span seconds, not a fraction of one."""
    return min(most, math.ceil(steps * (widest / width) ** 2))


def interpolated(points: dict[float, float], at: float) -> float:
    """The value at `at` on the straight lines between the measured points (no extrapolation)."""
    sizes = sorted(points)
    if not sizes[0] <= at <= sizes[-1]:
        raise ValueError(f"{at / MB:.2f} MB lies outside the measured {sizes[0] / MB:.2f}-{sizes[-1] / MB:.2f} MB")
    return float(np.interp(at, sizes, [points[size] for size in sizes]))


def communication_cost(rows: list[dict], strategy: str, fit_widths: list[int]) -> dict[str, Any]:
    """The strategy's communication at a free wire, measured at the fit widths, by payload (bytes sent and received
    per step): `step_s`, its step's time beyond one process's step at the same width (CPU and waiting on a peer);
    `cpu_s`, its process's CPU beyond one process's."""
    single = {r["width"]: r for r in rows if r["strategy"] == "single"}
    own = sorted((r for r in rows if r["strategy"] == strategy and r["width"] in fit_widths), key=lambda r: r["bytes"])
    return {"points": [{"width": r["width"], "mb": r["bytes"] / MB,
                        "step_s": r["step_s"] - single[r["width"]]["step_s"],
                        "cpu_s": r["cpu_s"] - single[r["width"]]["cpu_s"]} for r in own]}


def predicted_step(rows: list[dict], strategy: str, cost: dict[str, Any], width: int) -> dict[str, Any]:
    """At a free wire: one process's step at this width plus the strategy's communication at its payload, on the
    straight line between the two nearest fitted payloads."""
    single = next(r for r in rows if r["strategy"] == "single" and r["width"] == width)
    own = next(r for r in rows if r["strategy"] == strategy and r["width"] == width)
    comm_s = interpolated({p["mb"] * MB: p["step_s"] for p in cost["points"]}, own["bytes"])
    predicted = single["step_s"] + comm_s
    return {"width": width, "mb": own["bytes"] / MB, "compute_s": single["step_s"], "comm_s": comm_s,
            "predicted_s": predicted, "measured_s": own["step_s"], "error": predicted / own["step_s"] - 1,
            "faithful": own["faithful"] and single["faithful"]}


def means(rows: list[dict]) -> list[dict]:
    """The repeats' mean of each (strategy, width): faithful only where every repeat was."""
    keys = sorted({(r["strategy"], r["width"]) for r in rows})
    found = []
    for strategy, width in keys:
        same = [r for r in rows if (r["strategy"], r["width"]) == (strategy, width)]
        found.append({"strategy": strategy, "width": width, "faithful": all(r["faithful"] for r in same),
                      **{k: statistics.fmean(r[k] for r in same) for k in ("cpu_s", "step_s", "bytes")}})
    return found


def held_out_cases(rows: list[dict], strategy: str, fit_widths: list[int], held_out: list[int]) -> dict[str, Any]:
    cost = communication_cost(rows, strategy, fit_widths)
    return cost | {"held_out": [predicted_step(rows, strategy, cost, width) for width in held_out]}


def run(text: str | None = None) -> dict:
    settings = grid_settings(DEFAULT_GRID, "--comm_cpu-grid", text)
    chosen = settings["strategies"].split(",")
    if unknown := [s for s in chosen if s not in STRATEGIES]:
        raise ValueError(f"--comm_cpu-grid: unknown strategies {unknown} (here: {', '.join(STRATEGIES)})")
    fit_widths, held_out = ints(settings["fit_widths"]), ints(settings["held_out_widths"])
    if outside := [w for w in held_out if not min(fit_widths) < w < max(fit_widths)]:
        raise ValueError(f"--comm_cpu-grid: held-out widths {outside} lie outside the fit widths' range: the model "
                         f"interpolates between measured sizes and does not extrapolate")
    steps, most, warmup, repeats = (int(settings[key]) for key in ("steps", "max_steps", "warmup", "repeats"))
    widths = fit_widths + held_out
    order = ["single", *chosen]
    raw = [{"repeat": repeat, **measure(strategy, width, steps_for(width, max(widths), steps, most), warmup)}
           for repeat in range(repeats) for width in widths
           for strategy in (order if repeat % 2 == 0 else order[::-1])]
    rows = means(raw)
    by_strategy = {strategy: held_out_cases(rows, strategy, fit_widths, held_out) for strategy in chosen}
    for repeat in range(repeats):  # each repeat's own error, fitted on that repeat alone: the spread
        alone = means([r for r in raw if r["repeat"] == repeat])
        for strategy in chosen:
            for case, again in zip(by_strategy[strategy]["held_out"],
                                   held_out_cases(alone, strategy, fit_widths, held_out)["held_out"]):
                case.setdefault("repeat_errors", []).append(again["error"])
    cases = [case for figures in by_strategy.values() for case in figures["held_out"]]
    counted = [case for case in cases if case["faithful"]]
    worst = max(counted, key=lambda case: abs(case["error"]), default=None)
    return {
        "name": "comm_cpu",
        "ratio": None if worst is None else 1 + worst["error"],
        "goal": f"at a free wire (loopback), each synchronous strategy's step predicted as one process's step plus its "
                f"communication time, measured at other message sizes and read on the straight line between the two "
                f"nearest, within ±{TOLERANCE:.0%} of the measured step (the repeats' mean) at held-out message sizes",
        "goal_met": worst is not None and len(counted) == len(cases) and abs(worst["error"]) <= TOLERANCE,
        "by_strategy": by_strategy,
        "rows": rows,
        "raw": raw,
        "setup": f"model=mlp, loopback, peer_cpus=1: single on 1 process, {', '.join(chosen)} on 2; fit at widths "
                 f"{fit_widths}, held out {held_out}; {steps} steps at the widest width, more at narrower ones in "
                 f"proportion to width squared (at most {most}), the first {warmup} left out; {repeats} repeats in "
                 f"alternated order",
    }
