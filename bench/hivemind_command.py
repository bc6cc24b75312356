#!/usr/bin/env python
"""The README's `python train.py strategy=hivemind peers=8`, timed as typed: how long it takes, how far its worst
worker got, how its averaging rounds went and whether its CPUs and links held. The result replaces
bench/results/hivemind_command.json (--out: another folder), the repeats' median minutes its ratio."""
import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.evaluation_share import figures_of, measure_once  # noqa: E402
from bench.results import recorded, save  # noqa: E402
from bench.run import run_script, script_parser  # noqa: E402
from metrics.recording.methods import methods  # noqa: E402
from metrics.recording.rundir import RunDir  # noqa: E402
from metrics.summary.fidelity import unfaithful  # noqa: E402
from metrics.summary.schema import Summary  # noqa: E402

COMMAND = ["strategy=hivemind", "peers=8"]


def figures(run_dir: Path, command_s: float) -> dict[str, Any]:
    """One repeat's figures from the run's own records (evaluation's as bench/evaluation_share.py reads them)."""
    summary = Summary.load(RunDir(run_dir).summary)
    rounds = summary.averaging_rounds
    return figures_of(run_dir, command_s) | {
        "worst_accuracy": summary.accuracy_by_worker.worst, "target": summary.target,
        "time_to_target_s": summary.time_to_target_s,
        "throughput_samples_per_s": summary.throughput_samples_per_s,
        "averaging_rounds": len(rounds.rounds), "failed_rounds": rounds.failed,
        "oversubscription": summary.shape.oversubscription, "cores": summary.shape.cores,
        "unfaithful": unfaithful(summary),
    }


def line(i: int, r: dict[str, Any]) -> str:
    reached = (f"target reached at {r['time_to_target_s']:.0f} s of training" if r["time_to_target_s"] is not None
               else f"target not reached (worst worker {r['worst_accuracy']:.3f})")
    return (f"repeat {i}: command {r['command_s'] / 60:.1f} min, training {r['train_s'] / 60:.1f} min, evaluation "
            f"after training {r['after_training_s'] / 60:.1f} min; {reached}; {r['averaging_rounds']} averaging "
            f"rounds, {r['failed_rounds']} failed; oversubscribed {r['oversubscription']:.2g}x on {r['cores']} cores; "
            + ("faithful" if not r["unfaithful"] else "unfaithful: " + "; ".join(r["unfaithful"])))


def run(args: argparse.Namespace) -> None:
    repeats = []
    for i in range(args.repeats):
        repeats.append(measure_once(COMMAND, figures))
        print(line(i, repeats[-1]), flush=True)
    minutes = statistics.median(r["command_s"] / 60 for r in repeats)
    result = {"name": "hivemind_command", "ratio": minutes, "goal": "measured (no goal): the command's minutes",
              "setup": "as typed: python train.py " + " ".join(["hydra.run.dir=<temporary>", *COMMAND])
                       + " (conf/config.yaml defaults)",
              "method": methods("bench")["hivemind_command"], "repeats": repeats}
    if not args.no_save:
        print(f"saved {save(recorded(result), args.out)}")


def main() -> int:
    parser = script_parser(__doc__, repeats=1)
    return run_script(parser, run)


if __name__ == "__main__":
    sys.exit(main())
