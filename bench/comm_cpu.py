"""Communication's cost apart from compute: each engine's time and CPU per step on its real path with a compute-free
model, on loopback (a wire that costs nothing), and whether one process's compute plus that cost predicts the step."""
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from bench.jobs import averaging_strategies, grid_settings, ints, train
from metrics.recording.jsonl import read_jsonl
from metrics.recording.rundir import RunDir
from metrics.recording.steplog import PHASES
from metrics.summary.schema import Summary

DEFAULT_GRID = "strategies=allreduce,ring,stepwise,ps widths=320,864,1728,2400 steps=40 max_steps=1000 warmup=5 " \
               "repeats=3"
STRATEGIES = averaging_strategies("comm_cpu")
MODEL_OVERRIDES = {"mlp": ["model=mlp", "model.width={width}"],  # compute and its communication
                   "twin": ["model=custom", "model.target=bench.payload:mlp_twin",  # the same parameters, no arithmetic
                            "+model.options.width={width}"]}
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
                "step_s": statistics.fmean(sum(s.get(p, 0.0) for p in PHASES) for s in steps),
                "bytes": statistics.fmean(s["bytes_sent"] + s["bytes_recv"] for s in steps)})
    if not per_worker:
        raise RuntimeError(f"{run}: no worker logged a step after step {warmup}")
    return {key: statistics.fmean(w[key] for w in per_worker) for key in per_worker[0]}


def measure(strategy: str, model: str, width: int, steps: int, warmup: int) -> dict[str, Any]:
    """One run on loopback, `model` (MODEL_OVERRIDES) at this width: `single` on one process, an averaging strategy
    on two."""
    shape = ["strategy=single", "peers=1"] if strategy == "single" else [*STRATEGIES[strategy], "peers=2"]
    model_shape = [override.format(width=width) for override in MODEL_OVERRIDES[model]]
    with train(*shape, "peer_cpus=1", "network=loopback", *model_shape, f"max_steps={steps}", "eval_every=0") as run:
        summary = Summary.load(RunDir(run).summary)
        figures = worker_figures(run, warmup)
    print(f"comm_cpu: {strategy} {model} width {width}: {figures['cpu_s'] * 1e3:.1f} ms CPU, "
          f"{figures['step_s'] * 1e3:.1f} ms a step, {figures['bytes'] / MB:.2f} MB", file=sys.stderr, flush=True)
    return {"strategy": strategy, "model": model, "width": width, **figures,
            "faithful": summary.isolation.faithful is not False}


def steps_for(width: int, widest: int, steps: int, most: int) -> int:
    """Steps of a run at this width: `steps` at the widest, more at narrower widths in proportion to the work a step
    saves (width squared), at most `most`, so that a narrow run's steps span seconds, not a fraction of one."""
    return min(most, math.ceil(steps * (widest / width) ** 2))


def means(rows: list[dict]) -> dict[tuple[str, str, int], dict]:
    """(strategy, model, width) -> the repeats' mean: faithful only where every repeat was."""
    found = {}
    for key in sorted({(r["strategy"], r["model"], r["width"]) for r in rows}):
        same = [r for r in rows if (r["strategy"], r["model"], r["width"]) == key]
        found[key] = {"faithful": all(r["faithful"] for r in same),
                      **{k: statistics.fmean(r[k] for r in same) for k in ("cpu_s", "step_s", "bytes")}}
    return found


def predicted_step(rows: dict[tuple[str, str, int], dict], strategy: str, width: int) -> dict[str, Any]:
    """At a free wire: one process's step with compute plus the strategy's communication, its compute-free twin's
    step beyond one process's twin step at the same payload."""
    compute, measured = rows["single", "mlp", width], rows[strategy, "mlp", width]
    twin, single_twin = rows[strategy, "twin", width], rows["single", "twin", width]
    if twin["bytes"] != measured["bytes"]:
        raise AssertionError(f"{strategy} width {width}: the twin's payload {twin['bytes']:.0f} B differs from "
                             f"the model's {measured['bytes']:.0f} B")
    comm_s = twin["step_s"] - single_twin["step_s"]
    comm_cpu_s = twin["cpu_s"] - single_twin["cpu_s"]
    predicted = compute["step_s"] + comm_s
    return {"width": width, "mb": measured["bytes"] / MB, "compute_s": compute["step_s"], "comm_s": comm_s,
            "comm_cpu_s": comm_cpu_s, "comm_cpu_ms_per_mb": comm_cpu_s * 1e3 / (measured["bytes"] / MB),
            "predicted_s": predicted, "measured_s": measured["step_s"], "error": predicted / measured["step_s"] - 1,
            "faithful": all(r["faithful"] for r in (compute, measured, twin, single_twin))}


def run(text: str | None = None) -> dict:
    settings = grid_settings(DEFAULT_GRID, "--comm_cpu-grid", text)
    chosen = settings["strategies"].split(",")
    if unknown := [s for s in chosen if s not in STRATEGIES]:
        raise ValueError(f"--comm_cpu-grid: unknown strategies {unknown} (here: {', '.join(STRATEGIES)})")
    widths = ints(settings["widths"])
    steps, most, warmup, repeats = (int(settings[key]) for key in ("steps", "max_steps", "warmup", "repeats"))
    order = [(strategy, model) for strategy in ["single", *chosen] for model in MODEL_OVERRIDES]
    raw = [{"repeat": repeat, **measure(strategy, model, width, steps_for(width, max(widths), steps, most), warmup)}
           for repeat in range(repeats) for width in widths
           for strategy, model in (order if repeat % 2 == 0 else order[::-1])]
    rows = means(raw)
    by_strategy = {strategy: [predicted_step(rows, strategy, width) for width in widths] for strategy in chosen}
    for repeat in range(repeats):  # each repeat's own error: the spread
        alone = means([r for r in raw if r["repeat"] == repeat])
        for strategy in chosen:
            for case in by_strategy[strategy]:
                case.setdefault("repeat_errors", []).append(predicted_step(alone, strategy, case["width"])["error"])
    cases = [case for figures in by_strategy.values() for case in figures]
    counted = [case for case in cases if case["faithful"]]
    worst = max(counted, key=lambda case: abs(case["error"]), default=None)
    return {
        "name": "comm_cpu",
        "ratio": None if worst is None else 1 + worst["error"],
        "goal": f"at a free wire (loopback), each synchronous strategy's step predicted as one process's step plus "
                f"its communication time on a compute-free model of the same parameters, within ±{TOLERANCE:.0%} of "
                f"the measured step (the repeats' mean) at each width",
        "goal_met": worst is not None and len(counted) == len(cases) and abs(worst["error"]) <= TOLERANCE,
        "by_strategy": by_strategy,
        "rows": [{"strategy": s, "model": m, "width": w, **figures} for (s, m, w), figures in rows.items()],
        "raw": raw,
        "setup": f"model=mlp and its compute-free twin (bench/payload.py), loopback, peer_cpus=1: single on 1 process, "
                 f"{', '.join(chosen)} on 2; widths {widths}; {steps} steps at the widest width, more at narrower "
                 f"ones in proportion to width squared (at most {most}), the first {warmup} left out; {repeats} "
                 f"repeats in alternated order",
    }
