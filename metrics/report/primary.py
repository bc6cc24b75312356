"""The primary figure the verdict ranks and claims on, declared before the first run (`report.primary`, kept in the
sweep's plan): time_to_target or throughput, and each run's observation of it."""
import math
from dataclasses import dataclass
from typing import Any

from metrics.report.runs import Run
from metrics.summary.schema import Json

TIME_TO_TARGET, THROUGHPUT = "time_to_target", "throughput"
CHOICES = ("auto", TIME_TO_TARGET, THROUGHPUT)
DEFAULT_ESTIMATOR = "confirmed_crossing"


@dataclass(frozen=True)
class Primary:
    figure: str                 # time_to_target | throughput
    metric: str | None = None   # the target's (time_to_target only)
    value: float | None = None
    estimator: str | None = None
    declared: str = "auto"      # what report.primary said

    @property
    def name(self) -> str:
        return self.figure.replace("_", "-")

    @property
    def is_time(self) -> bool:
        return self.figure == TIME_TO_TARGET

    @property
    def target(self) -> str:
        relation = "≥" if self.metric == "test_accuracy" else "≤"
        return f"{self.metric} {relation} {self.value}"

    @property
    def text(self) -> str:
        """The figure, its target and estimator, as the report and the sweep's first lines name it."""
        if self.is_time:
            return f"time-to-target ({self.target}, estimator {self.estimator}; seconds of training)"
        return "throughput (all workers' samples / the longest worker's training time, samples/s)"


def declare(config: Json) -> Primary:
    """A run config's report.primary (auto: time_to_target on real data, throughput on synthetic), with its target."""
    choice = (config.get("report") or {}).get("primary", "auto")
    if choice not in CHOICES:
        raise ValueError(f"report.primary must be one of {', '.join(CHOICES)}, got {choice}")
    synthetic = config["data"]["name"] == "synthetic"
    figure = (THROUGHPUT if synthetic else TIME_TO_TARGET) if choice == "auto" else choice
    if figure == TIME_TO_TARGET and synthetic:
        raise ValueError("report.primary=time_to_target on synthetic data: its accuracy has no convergence meaning "
                         "(use report.primary=throughput or auto)")
    if figure == THROUGHPUT:
        return Primary(THROUGHPUT, declared=choice)
    target = config.get("target") or {}
    return Primary(TIME_TO_TARGET, target.get("metric"), target.get("value"),
                   target.get("estimator", DEFAULT_ESTIMATOR), choice)


def from_dict(found: Json) -> Primary:
    fields: dict[str, Any] = {k: found.get(k) for k in ("figure", "metric", "value", "estimator")}
    return Primary(**fields, declared=found.get("declared", "auto"))


@dataclass(frozen=True)
class Observation:
    """A run's time-to-target, known to lie in [low, high] seconds; reached: it crossed the target."""
    low: float
    high: float
    reached: bool

    @property
    def exact(self) -> bool:
        return self.reached and self.low == self.high

    @property
    def order(self) -> tuple[int, float]:
        """Fastest first: a crossing at the first evaluation, then crossings by time, then misses (the slowest)."""
        return (1, self.low) if self.exact else (0, 0.0) if self.reached else (2, 0.0)

    @property
    def mlperf(self) -> float:
        """The time MLPerf's rule counts: a miss as infinitely slow."""
        return self.low if self.reached else math.inf


def training_time(run: Run) -> float | None:
    """The longest worker's training time: all workers' samples / the throughput."""
    samples, throughput = run.summary.total_samples, run.summary.throughput_samples_per_s
    return samples / throughput if samples and throughput else None


def time_observation(run: Run) -> Observation:
    """Where the run's time-to-target lies: exactly where it crossed (a crossing at the first evaluation: between 0 and
    the next evaluation); else, or where it did not complete, above the evaluation before its last (right-censored)."""
    reached = run.summary.time_to_target_s if run.completed else None
    if reached is not None and reached > 0:
        return Observation(reached, reached, True)
    if reached is not None:  # a crossing at the first evaluation: before the next one
        after = [w.evals[1]["train_s"] for w in run.workers if len(w.evals) > 1 and "train_s" in w.evals[1]]
        end = max(after) if after else training_time(run)
        return Observation(0.0, math.inf if end is None else end, True)
    crossed = [t for t in (run.summary.time_to_target_by_rank or {}).values() if t is not None]
    covered = [w.evals[-2]["train_s"] for w in run.workers if len(w.evals) > 1 and "train_s" in w.evals[-2]]
    return Observation(max(crossed + covered, default=0.0), math.inf, False)
