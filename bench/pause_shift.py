"""Does evaluating in training's pauses change the step time it measures? Paired runs, in training against
after training, in ABBA order."""
import argparse
import math
import statistics
from typing import Any

from bench.jobs import abba, train
from metrics.recording.jsonl import read_jsonl
from metrics.recording.rundir import RunDir
from metrics.report.stats import Ratio
from metrics.summary.schema import Summary

GOAL = 0.03  # the pause may shift step time by less than this share
CONFIGURATIONS = {  # name -> overrides: identical-snapshot strategies, which can evaluate in training
    "single": ["strategy=single"],
    "allreduce": ["strategy=allreduce", "peers=2", "network=loopback"],
}
RUN = ["max_steps=35", "eval_every=10", "measure_window.after_step=5", "measure_window.steps=30"]


def step_s(overrides: list[str], in_training: bool) -> tuple[float, float]:
    """The run's step time over the window, and its steps after a pause position / its other steps."""
    with train(*RUN, *overrides, f"eval_in_training={str(in_training).lower()}") as run_dir:
        run = RunDir(run_dir)
        summary = Summary.load(run.summary)
        window = summary.window
        if summary.status != "completed" or not window.complete or window.first is None or window.last is None:
            raise RuntimeError(f"{overrides}: {summary.status}, window {window.to_dict()}")
        if summary.total_samples is None or summary.throughput_samples_per_s is None:
            raise RuntimeError(f"{overrides}: its summary has no total_samples or throughput")
        after_pause = statistics.fmean(after_pause_ratio(read_jsonl(peer.steps), window.first, window.last)
                                       for peer in run.peers() if peer.steps.exists())
    batch = summary.total_samples / max(p.steps for p in summary.peers)  # all workers' samples a step
    return batch / summary.throughput_samples_per_s, after_pause


def after_pause_ratio(steps: list[dict[str, Any]], first: int, last: int) -> float:
    """Mean duration of the window's steps just after a pause position / that of its other steps."""
    every = int(next(word for word in RUN if word.startswith("eval_every=")).split("=")[1])
    durations = {s["step"]: s["train_s"] - before["train_s"] for before, s in zip(steps, steps[1:])
                 if first <= s["step"] <= last}
    after = [d for step, d in durations.items() if step % every == 1]
    return statistics.fmean(after) / statistics.fmean(d for step, d in durations.items() if step % every != 1)


def within_goal(ratio: Ratio) -> tuple[list[float] | None, bool]:
    """The ratio's 95 % interval (None: one pair, or no spread) and whether it lies within 1 ± GOAL."""
    if (interval := ratio.interval()) is None:
        return None, False
    low, high = interval
    return [low, high], 1 - GOAL < low and high < 1 + GOAL


def add_arguments(group: argparse._ActionsContainer) -> None:
    group.add_argument("--pause-shift-pairs", dest="pause_shift_pairs", type=int, metavar="N",
                       help="pairs of runs per configuration (default 6)")


def run(pairs: int = 6, configurations: str = "single,allreduce") -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {}
    for name in configurations.split(","):
        in_training, after = abba(pairs, lambda mode: step_s(CONFIGURATIONS[name], mode))
        ratio = Ratio([a[0] / b[0] for a, b in zip(in_training, after)])
        within = Ratio([a[1] / b[1] for a, b in zip(in_training, after)])
        interval, goal_met = within_goal(ratio)
        within_interval, within_goal_met = within_goal(within)
        rows[name] = {"ratio": ratio.estimate, "interval": interval, "pairs": pairs,
                      "in_training_step_s": [a[0] for a in in_training], "after_training_step_s": [b[0] for b in after],
                      "goal_met": goal_met,
                      "within_run": {"ratio": within.estimate, "interval": within_interval,
                                     "in_training_after_pause": [a[1] for a in in_training],
                                     "after_training_same_steps": [b[1] for b in after],
                                     "goal_met": within_goal_met}}
    worst = max(rows.values(), key=lambda r: abs(math.log(r["within_run"]["ratio"])))
    return {
        "name": "pause_shift",
        "ratio": worst["within_run"]["ratio"],
        "goal": f"the step time's 95 % interval within 1 ± {GOAL:.0%} (in-training / after-training), within runs",
        "goal_met": all(r["within_run"]["goal_met"] for r in rows.values()),
        "between_runs_goal_met": all(r["goal_met"] for r in rows.values()),
        "configurations": rows,
        "setup": " ".join(RUN) + f"; {pairs} pairs, ABBA order; " + "; ".join(
            f"{n}: {' '.join(CONFIGURATIONS[n])}" for n in configurations.split(",")),
    }
