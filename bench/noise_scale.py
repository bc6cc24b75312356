"""Whether the gradient noise scale predicts samples-to-target at larger global batches (docs/projection.md): per
repeat, a 2-peer allreduce run measures B_simple at B0, and one process (ghost BatchNorm) samples-to-target at B0 and
each larger B; E(B) = E(B0) (1 + B / Bn) / (1 + B0 / Bn) on the repeats' geometric means, against the measured.
"""
import math
import statistics
from typing import Any

from bench.jobs import grid_settings, ints, summary_of
from metrics.projection.batch_scaling import GOAL, samples_at

DEFAULT_GRID = "model=resnet18 repeats=3 batch_size=32 batches=128,256,512 lr_scaling=none"
BASE_STEPS = 100    # the B0 runs' max_steps (the headline's)
STEPS_MARGIN = 1.5  # a larger batch's max_steps: this x the steps B0 took to the target (the model has it need fewer)
EVAL_SAMPLES = 512  # samples between evaluations, whatever the batch (the crossing's resolution)


def log_sd(values: list[float]) -> float | None:
    return statistics.stdev(math.log(v) for v in values) if len(values) > 1 else None


def single_run(settings: dict[str, str], batch: int, seed: int, steps: int) -> dict[str, Any]:
    b = int(settings["batch_size"])
    summary = summary_of("strategy=single", f"peers={batch // b}", f"batch_size={b}", f"model={settings['model']}",
                         f"lr_scaling={settings['lr_scaling']}", f"seed={seed}", f"max_steps={steps}",
                         f"eval_every={max(1, EVAL_SAMPLES // batch)}", timeout=3600)
    return {"samples_to_target": summary.samples_to_target, "reached": summary.samples_to_target is not None,
            "throughput_samples_per_s": summary.throughput_samples_per_s}


def run(text: str | None = None) -> dict[str, Any]:
    settings = grid_settings(DEFAULT_GRID, "--noise_scale-grid", text)
    b, repeats, larger = int(settings["batch_size"]), int(settings["repeats"]), ints(settings["batches"])
    base = 2 * b
    if any(batch <= base or batch % b for batch in larger):
        raise ValueError(f"batches must be multiples of batch_size={b} above B0={base}, got {larger}")
    measured: dict[int, list[dict[str, Any]]] = {batch: [] for batch in (base, *larger)}
    noise_scales: list[float | None] = []
    for seed in range(repeats):
        summary = summary_of("strategy=allreduce", "peers=2", f"batch_size={b}", f"model={settings['model']}",
                             f"lr_scaling={settings['lr_scaling']}", f"seed={seed}", f"max_steps={BASE_STEPS}",
                             "noise_scale_every=1", "eval_every=0", "network=loopback", timeout=3600)
        noise_scales.append(summary.noise_scale.b_simple)
        measured[base].append(single_run(settings, base, seed, BASE_STEPS))
        base_steps = (measured[base][-1]["samples_to_target"] or BASE_STEPS * base) / base
        for batch in larger:  # E = E_min (1 + B / Bn) takes at most B0's steps at a larger batch: a margin above it
            measured[batch].append(single_run(settings, batch, seed, math.ceil(STEPS_MARGIN * base_steps)))
    positive = [v for v in noise_scales if v and v > 0]
    noise_scale = statistics.geometric_mean(positive) if len(positive) == len(noise_scales) else None
    reached = all(r["reached"] for runs in measured.values() for r in runs)
    base_samples = statistics.geometric_mean([r["samples_to_target"] for r in measured[base]]) if reached else None
    rows: list[dict[str, Any]] = []
    for batch in larger:
        samples = [r["samples_to_target"] for r in measured[batch]]
        row: dict[str, Any] = {"batch": batch,
                               "measured_samples_to_target": statistics.geometric_mean(samples) if reached else None,
                               "measured_log_sd": log_sd(samples) if reached else None, "runs": measured[batch]}
        if base_samples is not None and noise_scale:  # base_samples: None unless every run reached the target
            row["predicted_samples_to_target"] = samples_at(base_samples, base, batch, noise_scale)
            row["error"] = row["predicted_samples_to_target"] / row["measured_samples_to_target"] - 1
        rows.append(row)
    errors = [r["error"] for r in rows if "error" in r]
    passed = reached and noise_scale is not None and len(errors) == len(rows) and max(map(abs, errors)) <= GOAL
    result = {"name": "noise_scale", "ratio": max(map(abs, errors)) if errors else None,
              "goal": f"every |error| <= {GOAL:.0%}", "passed": passed,
              "setup": f"{settings['model']}, B0 = 2 x {b}, batches {larger}, lr_scaling={settings['lr_scaling']}, "
                       f"{repeats} repeats",
              "model": settings["model"], "lr_scaling": settings["lr_scaling"], "base_batch": base,
              "noise_scale": noise_scale, "noise_scale_by_repeat": noise_scales,
              "base_samples_to_target": base_samples, "base_runs": measured[base], "rows": rows}
    if not reached:
        result["why"] = "some run did not reach the target within its steps: no prediction is checked"
    return result
