"""Does evaluating in training's pauses change the step time it measures? Pairs of runs of one configuration, one
evaluating each snapshot in its pause (eval_in_training=true), one after training (false), run one after the
other, the order alternating from pair to pair (ABBA). The run is short enough that neither reaches the target, and
its pauses (every eval_every steps) fall inside the measurement window (measure_window).

Per run: step time = the summary's throughput over the window (samples per second) turned into seconds per step of
all workers' batch. Per pair: ratio = in-training step / after-training step. The shift is the geometric mean of the
pairs' ratios with its 95 % t-interval (metrics/report/stats.py Ratio); the goal: the interval inside 1 ± GOAL.
"""
import json
import math

from bench.jobs import train
from metrics.recording.rundir import RunDir
from metrics.report.stats import Ratio

GOAL = 0.03  # the pause may shift step time by less than this share
CONFIGURATIONS = {  # name -> overrides: identical-snapshot strategies, which can evaluate in training
    "single": ["strategy=single"],
    "allreduce": ["strategy=allreduce", "peers=2", "network=loopback"],
}
RUN = ["max_steps=35", "eval_every=10", "measure_window.after_step=5", "measure_window.steps=30"]


def step_s(overrides: list[str], in_training: bool) -> float:
    with train(*RUN, *overrides, f"eval_in_training={str(in_training).lower()}") as run_dir:
        summary = json.loads(RunDir(run_dir).summary.read_text())
    if summary["status"] != "completed" or not summary["window"]["complete"]:
        raise RuntimeError(f"{overrides}: {summary['status']}, window {summary['window']}")
    batch = summary["total_samples"] / max(p["steps"] for p in summary["peers"])  # all workers' samples a step
    return batch / summary["throughput_samples_per_s"]


def run(pairs: int = 4, configurations: str = "single,allreduce") -> dict:
    rows = {}
    for name in configurations.split(","):
        in_training, after = [], []
        for pair in range(pairs):
            for mode in ((True, False) if pair % 2 == 0 else (False, True)):
                (in_training if mode else after).append(step_s(CONFIGURATIONS[name], mode))
        ratio = Ratio([a / b for a, b in zip(in_training, after)])
        low, high = ratio.interval()
        rows[name] = {"ratio": ratio.estimate, "interval": [low, high], "pairs": pairs,
                      "in_training_step_s": in_training, "after_training_step_s": after,
                      "goal_met": 1 - GOAL < low and high < 1 + GOAL}
    worst = max(rows.values(), key=lambda r: abs(math.log(r["ratio"])))
    return {
        "name": "pause_shift",
        "ratio": worst["ratio"],
        "goal": f"the step time's 95 % interval within 1 ± {GOAL:.0%} (in-training / after-training)",
        "goal_met": all(r["goal_met"] for r in rows.values()),
        "configurations": rows,
        "setup": " ".join(RUN) + f"; {pairs} pairs, ABBA order; " + "; ".join(
            f"{n}: {' '.join(CONFIGURATIONS[n])}" for n in configurations.split(",")),
        "method": __doc__.strip(),
    }
