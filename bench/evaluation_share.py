#!/usr/bin/env python
"""Evaluation's share of `make run`: the default run (`train.py` with no overrides), timed as a user types it,
and the time its workers spent evaluating, from the run's own records (the entry's method says how).

    flock /tmp/avgbench-measure.lock python bench/evaluation_share.py             # 2 repeats, about 3 minutes each
    python bench/evaluation_share.py --repeats 1 --no-save eval_every=10          # a variant, printed only

The result replaces bench/results/evaluation_share.json (--out: another folder), the repeats' mean share its ratio.
"""
import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.results import recorded, save  # noqa: E402
from bench.run import add_saving_options, under_machine_lock  # noqa: E402
from metrics.recording.jsonl import read_jsonl  # noqa: E402
from metrics.recording.methods import methods  # noqa: E402
from metrics.recording.rundir import RunDir  # noqa: E402
from metrics.summary.schema import Summary  # noqa: E402

GOAL = 0.15  # evaluation after training, at most this share of the default run's wall clock


def figures_of(run_dir: Path, command_s: float) -> dict[str, Any]:
    """One repeat's figures from the run's own records; command_s: the whole command's wall clock."""
    run = RunDir(run_dir)
    summary = Summary.load(run.summary)
    if summary.status != "completed":
        raise RuntimeError(f"the run {summary.status}: {summary.error}")
    workers = [peer for peer in run.peers() if peer.steps.exists()]
    evaluation = summary.evaluation
    computed = [e for peer in workers for e in read_jsonl(peer.evals) if e.get("evaluated_by", peer.rank) == peer.rank]
    precise_bn_s = sum(e["precise_bn_s"] for e in computed)
    return {
        "command_s": command_s,
        "wall_s": summary.wall_s,
        "train_s": max(read_jsonl(peer.steps)[-1]["train_s"] for peer in workers),
        "after_training_s": evaluation.after_training_s or 0.0,
        "snapshot_pause_s": evaluation.snapshot_pause_s,
        "evaluations": evaluation.evaluations,
        "evaluations_computed": len(computed),
        "precise_bn_s": precise_bn_s,
        "load_and_test_pass_s": sum(e["eval_s"] for e in computed) - precise_bn_s,
        "test_samples": evaluation.test_samples,
        "in_training_s": evaluation.in_training_s or 0.0,
        "share": ((evaluation.after_training_s or 0.0) + (evaluation.in_training_s or 0.0)) / command_s,
        "alone": summary.machine.alone,  # the machine around the run (summary.json machine)
        "other_cpu_share": summary.machine.other_cpu_share,
    }


def measure_once(overrides: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="avgbench-evaluation-share-") as scratch:
        run_dir = Path(scratch) / "run"
        log = Path(scratch) / "train.log"
        started = time.perf_counter()
        with open(log, "w") as output:
            done = subprocess.run([sys.executable, "train.py", f"hydra.run.dir={run_dir}", *overrides], cwd=ROOT,
                                  stdout=output, stderr=subprocess.STDOUT)
        command_s = time.perf_counter() - started
        if done.returncode:
            raise RuntimeError(f"train.py {' '.join(overrides)} exited {done.returncode}:\n{log.read_text()[-2000:]}")
        return figures_of(run_dir, command_s)


def line(i: int, r: dict[str, Any]) -> str:
    return (f"repeat {i}: command {r['command_s']:.1f} s, run {r['wall_s']:.1f} s, training {r['train_s']:.1f} s, "
            f"evaluation after training {r['after_training_s']:.1f} s, in training {r['in_training_s']:.1f} s = "
            f"{r['share']:.1%} of the command "
            f"({r['evaluations']} evaluations: precise BatchNorm {r['precise_bn_s']:.1f} s, load and test pass "
            f"{r['load_and_test_pass_s']:.1f} s); {'alone' if r['alone'] else 'NOT alone'} on the machine "
            f"(other processes' CPU {r['other_cpu_share']:.0%})")


def run(args: argparse.Namespace) -> None:
    repeats: list[dict[str, Any]] = []
    for i in range(args.repeats):
        repeats.append(measure_once(args.overrides))
        print(line(i, repeats[-1]), flush=True)
    shares = [r["share"] for r in repeats]
    mean = statistics.fmean(shares)
    verdict = "met" if max(shares) <= GOAL else "missed"
    print(f"evaluation share {mean:.1%} (repeats {', '.join(f'{s:.1%}' for s in shares)}); goal <= {GOAL:.0%}: "
          f"{verdict}")
    result = {"name": "evaluation_share", "ratio": mean, "goal": f"<= {GOAL:.0%} of make run's wall clock",
              "goal_met": verdict == "met",
              "setup": "make run as typed: python train.py " + " ".join(["hydra.run.dir=<temporary>", *args.overrides])
                       + " (conf/config.yaml defaults)",
              "method": methods("bench")["evaluation_share"],
              "repeats": repeats}
    if not args.no_save:
        print(f"saved {save(recorded(result), args.out)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides: a variant of the default run")
    parser.add_argument("--repeats", type=int, default=2, help="runs, one after the other (default 2)")
    add_saving_options(parser)
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    return under_machine_lock(args.lock, lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
