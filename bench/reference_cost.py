"""What the speed reference costs a run: `make run`'s default run with and without it, in ABBA pairs."""
import argparse
import statistics
from pathlib import Path
from typing import Any

from bench.jobs import abba, summary_of
from metrics.recording.machine import describe_machine, same_machine
from metrics.report.stats import Ratio

GOAL = 0.02  # the reference may cost at most this share of a run


def run_figures(with_reference: bool) -> dict[str, Any]:
    summary = summary_of(*([] if with_reference else ["speed_reference.repetitions=0"]))
    if summary.status != "completed":
        raise RuntimeError(f"the run {summary.status}: {summary.error}")
    return {"wall_s": summary.wall_s, "cost_share": summary.speed_reference.cost_share,
            "machine": summary.machine.fingerprint}


def one_machine(runs: list[dict[str, Any]]) -> dict:
    """The machine every run of the comparison was measured on; ValueError where a log mixes machines (or holds runs
    whose machine was not recorded): pairs from two machines measure neither."""
    first = runs[0].get("machine") or {}
    if not all(same_machine(r.get("machine") or {}, first) for r in runs):
        seen = sorted({describe_machine(r.get("machine") or {}) for r in runs})
        raise ValueError(f"the pairs were measured on more than one machine ({'; '.join(seen)}): start a new log")
    return first


def run(pairs: int = 3, log: str | None = None) -> dict[str, Any]:
    with_runs, without = abba(pairs, run_figures, Path(log) if log else None)
    machine = one_machine(with_runs + without)
    ratio = Ratio([a["wall_s"] / b["wall_s"] for a, b in zip(with_runs, without)])
    low, high = ratio.interval() or (None, None)
    return {
        "name": "reference_cost",
        "ratio": ratio.estimate,
        "interval": [low, high],
        "goal": f"the wall clock's 95 % interval (with / without the reference) at most 1 + {GOAL:.0%}",
        "goal_met": high is not None and high <= 1 + GOAL,
        "pairs": pairs,
        "with_reference": with_runs,
        "without_reference": without,
        "accounted_cost_share": statistics.fmean(r["cost_share"] for r in with_runs),
        "setup": f"make run's default run (train.py, no overrides); {pairs} pairs, ABBA order, on "
                 f"{describe_machine(machine)}",
    }


def add_arguments(group: argparse._ActionsContainer) -> None:
    group.add_argument("--reference-cost-pairs", dest="reference_cost_pairs", type=int, metavar="N",
                       help="pairs of runs (default 3)")
    group.add_argument("--reference-cost-log", dest="reference_cost_log", metavar="JSONL",
                       help="append each run's figures here as it ends; a rerun takes the runs it holds and goes on")
