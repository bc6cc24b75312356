"""Time-to-target: the fractional step where a worker's learning curve reaches the target by the declared estimator,
or None (censored, never extrapolated); in train_s and samples, with a test-set bootstrap (methods.yaml target)."""
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
from metrics.recording.methods import methods

ESTIMATORS = ("causal_isotonic", "confirmed_crossing", "isotonic")
CAUSAL = ("causal_isotonic", "confirmed_crossing")  # decide at an evaluation without the ones after the next
UNDECLARED = "confirmed_crossing"  # summaries written before the estimator was declared used this one
LEVEL = 0.95  # the bootstrap interval's coverage
BOOTSTRAP_SEED = 0  # the resamples: the same for every run, so a summary is reproducible

METHODS = methods("target")


def confirmed_crossing(steps: np.ndarray, values: np.ndarray, value: float) -> float | None:
    """The first evaluation at or above the value whose next one is too, interpolated from the one before."""
    for i in range(len(values) - 1):
        if values[i] >= value and values[i + 1] >= value:
            before = i - 1 if i else i
            span = values[i] - values[before]
            fraction = (value - values[before]) / span if span else 1.0
            return float(steps[before] + fraction * (steps[i] - steps[before]))
    return None


def pooled_heads(values: np.ndarray) -> Iterator[list[list]]:
    """The isotonic fit of each head of the curve (values[:1], values[:2], ...) by pooling adjacent violators: its
    blocks, [first, last, sum] each (one list, updated in place: read it before the next)."""
    blocks: list[list] = []
    for i, v in enumerate(values):
        blocks.append([i, i, float(v)])
        while len(blocks) > 1 and (blocks[-2][2] / (blocks[-2][1] - blocks[-2][0] + 1)
                                   > blocks[-1][2] / (blocks[-1][1] - blocks[-1][0] + 1)):
            first, last, total = blocks.pop()
            blocks[-1][1], blocks[-1][2] = last, blocks[-1][2] + total
        yield blocks


def pooled_blocks(values: np.ndarray) -> list[tuple[int, int, float]]:
    """The isotonic fit of the whole curve: (first, last, mean) of each pooled block."""
    blocks: list[list] = []
    for blocks in pooled_heads(values):
        pass
    return [(first, last, total / (last - first + 1)) for first, last, total in blocks]


def fit_crossing(steps: np.ndarray, blocks: list[tuple[int, int, float]], value: float) -> float | None:
    """Where a fit's line between the centres of its pooled blocks ((first, last, mean) each) reaches the value."""
    previous = None  # (centre, mean) of the block before
    for first, last, mean in blocks:
        centre = float(np.mean(steps[first:last + 1]))
        if mean >= value:
            if previous is None:
                return float(steps[0])
            return previous[0] + (value - previous[1]) / (mean - previous[1]) * (centre - previous[0])
        previous = centre, mean
    return None


def isotonic(steps: np.ndarray, values: np.ndarray, value: float) -> float | None:
    """Where the isotonic fit of the whole curve, read linearly between its blocks' centres, reaches the value."""
    return fit_crossing(steps, pooled_blocks(values), value)


def causal_isotonic(steps: np.ndarray, values: np.ndarray, value: float) -> float | None:
    """The isotonic crossing of the shortest head whose fit reaches the value by its second-to-last evaluation."""
    for k, blocks in enumerate(pooled_heads(values)):
        if k and blocks[-1][2] / (blocks[-1][1] - blocks[-1][0] + 1) >= value:  # else the head's fit stays below
            step = fit_crossing(steps, [(f, last, total / (last - f + 1)) for f, last, total in blocks], value)
            if step <= steps[k - 1]:
                return step
    return None


def meets(value: float, target: dict) -> bool:
    """Whether one evaluation's value is at the target (test_accuracy at or above it, test_loss at or below)."""
    return value >= target["value"] if target["metric"] == "test_accuracy" else value <= target["value"]


def crossing_step(steps: npt.ArrayLike, values: npt.ArrayLike, target: dict) -> float | None:
    """The fractional step at which the curve (metric values at steps) reaches the target, or None (censored)."""
    sign = 1.0 if target["metric"] == "test_accuracy" else -1.0
    estimator = {"causal_isotonic": causal_isotonic, "confirmed_crossing": confirmed_crossing,
                 "isotonic": isotonic}[target.get("estimator", UNDECLARED)]
    return estimator(np.asarray(steps, dtype=float), sign * np.asarray(values, dtype=float), sign * target["value"])


def samples_by_step(steps: list[dict]) -> Callable[[int], int]:
    """A worker's trained samples after a step (0 before its first; after its last, its total)."""
    counts = {s["step"]: s["samples"] for s in steps}
    ordered = sorted(counts)

    def at(step: int) -> int:
        done = [k for k in ordered if k <= step]
        return counts[done[-1]] if done else 0
    return at


class Curve:
    """One worker's learning curve: its evaluations, with the training clock at each."""

    def __init__(self, evals: list[dict], metric: str):
        self.evals = [e for e in evals if e.get(metric) is not None]
        self.steps = np.array([e["step"] for e in self.evals], dtype=float)
        self.values = np.array([e[metric] for e in self.evals], dtype=float)

    def around(self, step: float) -> tuple[dict, dict, float]:
        """The evaluations before and after a (fractional) step and the fraction of the way between them."""
        i = max(0, min(int(np.searchsorted(self.steps, step, side="right")) - 1, len(self.evals) - 2))
        before, after = self.evals[i], self.evals[min(i + 1, len(self.evals) - 1)]
        span = after["step"] - before["step"]
        return before, after, (step - before["step"]) / span if span else 0.0


def interpolated(before: dict, after: dict, fraction: float, key: str) -> float:
    return before[key] + fraction * (after[key] - before[key])


def time_to_target(evals_by_rank: dict[int, list[dict]], steps_by_rank: dict[int, list[dict]],
                   outcomes_by_rank: dict[int, Path], target: dict) -> dict:
    """When the worst worker reached the target (train_s, samples, steps), its bootstrap, whether the models match."""
    curves = {rank: Curve(evals, target["metric"]) for rank, evals in evals_by_rank.items()}
    counters = [samples_by_step(steps) for steps in steps_by_rank.values()]

    def all_samples(curve: Curve, step: float) -> float:
        before, after, fraction = curve.around(step)
        done = [sum(at(e["step"]) for at in counters) for e in (before, after)]
        return done[0] + fraction * (done[1] - done[0])

    crossings = {rank: crossing_step(c.steps, c.values, target) if len(c.evals) else None
                 for rank, c in curves.items()}
    crossed = {rank: step for rank, step in crossings.items() if step is not None}
    reached = bool(crossings) and len(crossed) == len(crossings)
    train_s = {rank: (interpolated(*curves[rank].around(step), "train_s") if step is not None else None)
               for rank, step in crossings.items()}
    samples = max(all_samples(curves[rank], step) for rank, step in crossed.items()) if reached else None
    worst_s = max(t for t in train_s.values() if t is not None) if reached else None
    identical = identical_states(evals_by_rank)
    return {
        "time_to_target_s": worst_s,
        "samples_to_target": samples,
        "samples_to_target_bootstrap": bootstrap(curves, outcomes_by_rank, target, all_samples, identical),
        "steps_to_target": max(crossed.values()) if reached else None,
        "time_per_sample_s": worst_s / samples if worst_s is not None and samples else None,
        "time_to_target_by_rank": train_s,
        "evaluated_states_identical": identical,
    }


def identical_states(evals_by_rank: dict[int, list[dict]]) -> bool | None:
    digests = [[e.get("state_sha256") for e in evals] for evals in evals_by_rank.values()]
    if not digests or any(None in d or not d for d in digests):
        return None
    return all(d == digests[0] for d in digests)


def bootstrap(curves: dict[int, Curve], outcomes_by_rank: dict[int, Path], target: dict,
              all_samples: Callable[[Curve, float], float], identical: bool | None) -> dict | None:
    """samples_to_target over test-set resamples (see METHODS); None without resamples or per-sample outcomes."""
    resamples = int(target.get("bootstrap", 0))
    ranks = list(curves)[:1] if identical else list(curves)  # identical workers: one curve
    loaded = {rank: load_outcomes(outcomes_by_rank.get(rank), curves[rank], target["metric"]) for rank in ranks}
    outcomes = {rank: o for rank, o in loaded.items() if o is not None}
    if not resamples or not loaded or len(outcomes) < len(loaded):
        return None
    tested = next(iter(outcomes.values())).shape[1]
    weights = np.random.default_rng(BOOTSTRAP_SEED).multinomial(tested, np.full(tested, 1 / tested), resamples)
    found = np.full(resamples, np.inf)  # the worst worker's crossing in all workers' samples; inf: censored
    curves_of = {rank: outcomes[rank] @ weights.T / tested for rank in ranks}  # evaluations x resamples
    for b in range(resamples):
        worst = 0.0
        for rank in ranks:
            step = crossing_step(curves[rank].steps, curves_of[rank][:, b], target)
            worst = np.inf if step is None else max(worst, all_samples(curves[rank], step))
            if worst == np.inf:
                break
        found[b] = worst
    crossed = found[np.isfinite(found) & (found > 0)]
    low, high = np.quantile(found, [(1 - LEVEL) / 2, (1 + LEVEL) / 2], method="inverted_cdf")
    return {"low": float(low) if np.isfinite(low) else None, "high": float(high) if np.isfinite(high) else None,
            "level": LEVEL, "log_sd": float(np.std(np.log(crossed), ddof=1)) if len(crossed) > 1 else None,
            "resamples": resamples, "censored": float(np.mean(~np.isfinite(found)))}


def load_outcomes(path: Path | None, curve: Curve, metric: str) -> np.ndarray | None:
    """Each evaluation's per-sample values (correct as 0/1, or loss), evaluations x samples; None: not the curve's."""
    if path is None or not path.exists():
        return None
    with np.load(path) as saved:
        if list(saved["step"]) != [e["step"] for e in curve.evals]:
            return None
        return saved["correct" if metric == "test_accuracy" else "loss"].astype(float)
