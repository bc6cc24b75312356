"""Communication's CPU, apart from compute: each engine's CPU seconds per byte on its real path, compute-free, on
loopback (a wire that costs nothing), and whether one process's compute plus that CPU predicts the step."""
import statistics
import sys
from pathlib import Path
from typing import Any

from bench.jobs import averaging_strategies, grid_settings, ints, train
from metrics.recording.jsonl import read_jsonl
from metrics.recording.rundir import RunDir
from metrics.summary.schema import Summary

DEFAULT_GRID = "strategies=allreduce,ring,stepwise,ps fit_widths=320,1728,3200 held_out_widths=864,2400 steps=40 " \
               "warmup=5 repeats=2"
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


def communication_cpu(rows: list[dict], strategy: str, fit_widths: list[int]) -> dict[str, Any]:
    """The strategy's communication CPU per step (its worker's CPU less one process's at the same width), fitted
    over the fit widths as a cost per step plus a cost per byte; and so its wait (the step's time beyond one
    process's step and that CPU)."""
    single = {r["width"]: r for r in rows if r["strategy"] == "single"}
    own = [r for r in rows if r["strategy"] == strategy and r["width"] in fit_widths]
    sizes = [r["bytes"] for r in own]
    cpu = [r["cpu_s"] - single[r["width"]]["cpu_s"] for r in own]
    # a step's time beyond compute and communication's CPU: waiting on a peer (its share of the copies) or the engine
    wait = [r["step_s"] - single[r["width"]]["step_s"] - c for r, c in zip(own, cpu)]
    cpu_fit, wait_fit = statistics.linear_regression(sizes, cpu), statistics.linear_regression(sizes, wait)
    return {"cpu_s_per_step": cpu_fit.intercept, "cpu_s_per_mb": cpu_fit.slope * MB,
            "wait_s_per_step": wait_fit.intercept, "wait_s_per_mb": wait_fit.slope * MB}


def predicted_step(rows: list[dict], strategy: str, cost: dict[str, Any], width: int) -> dict[str, Any]:
    """At a free wire: one process's step at this width, and the communication CPU and wait of the strategy's
    bytes."""
    single = next(r for r in rows if r["strategy"] == "single" and r["width"] == width)
    own = next(r for r in rows if r["strategy"] == strategy and r["width"] == width)
    comm_cpu_s = cost["cpu_s_per_step"] + cost["cpu_s_per_mb"] * own["bytes"] / MB
    wait_s = cost["wait_s_per_step"] + cost["wait_s_per_mb"] * own["bytes"] / MB
    predicted = single["step_s"] + comm_cpu_s + wait_s
    return {"width": width, "mb": own["bytes"] / MB, "compute_s": single["step_s"], "comm_cpu_s": comm_cpu_s,
            "wait_s": wait_s,
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


def run(text: str | None = None) -> dict:
    settings = grid_settings(DEFAULT_GRID, "--comm_cpu-grid", text)
    chosen = settings["strategies"].split(",")
    if unknown := [s for s in chosen if s not in STRATEGIES]:
        raise ValueError(f"--comm_cpu-grid: unknown strategies {unknown} (here: {', '.join(STRATEGIES)})")
    fit_widths, held_out = ints(settings["fit_widths"]), ints(settings["held_out_widths"])
    steps, warmup, repeats = int(settings["steps"]), int(settings["warmup"]), int(settings["repeats"])
    order = ["single", *chosen]
    raw = [measure(strategy, width, steps, warmup)
           for repeat in range(repeats) for width in fit_widths + held_out
           for strategy in (order if repeat % 2 == 0 else order[::-1])]
    rows = means(raw)
    by_strategy = {}
    for strategy in chosen:
        cost = communication_cpu(rows, strategy, fit_widths)
        by_strategy[strategy] = cost | {"held_out": [predicted_step(rows, strategy, cost, w) for w in held_out]}
    cases = [case for figures in by_strategy.values() for case in figures["held_out"]]
    counted = [case for case in cases if case["faithful"]]
    worst = max(counted, key=lambda case: abs(case["error"]), default=None)
    return {
        "name": "comm_cpu",
        "ratio": None if worst is None else 1 + worst["error"],
        "goal": f"at a free wire (loopback), each synchronous strategy's step predicted as one process's step plus its "
                f"communication CPU and wait (each per step + per byte), fitted at other message sizes, within "
                f"±{TOLERANCE:.0%} of the measured step at held-out message sizes",
        "goal_met": worst is not None and len(counted) == len(cases) and abs(worst["error"]) <= TOLERANCE,
        "by_strategy": by_strategy,
        "rows": rows,
        "raw": raw,
        "setup": f"model=mlp, loopback, peer_cpus=1: single on 1 process, {', '.join(chosen)} on 2; fit at widths "
                 f"{fit_widths}, held out {held_out}; {steps} steps (the first {warmup} left out), {repeats} repeats "
                 f"in alternated order",
    }
