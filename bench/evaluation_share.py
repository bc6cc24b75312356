#!/usr/bin/env python
"""Evaluation's share of `make run` (the default run, timed as typed; evaluation from its own records) and, with
--dense, how far the default interval moves the crossing of recorded runs evaluated more often (docs/usage.md). The
result replaces bench/results/evaluation_share.json (--out: another folder), the repeats' mean share its ratio."""
import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.results import load, recorded, save  # noqa: E402
from bench.run import run_script, script_parser  # noqa: E402
from metrics.recording.jsonl import read_jsonl  # noqa: E402
from metrics.recording.methods import methods  # noqa: E402
from metrics.recording.rundir import RunDir  # noqa: E402
from metrics.summary.schema import Summary  # noqa: E402
from job.loop import next_snapshot  # noqa: E402
from metrics.summary.target import crossing_step, meets  # noqa: E402

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
        "interval_steps": evaluation.interval_steps,
        "confirm_after_steps": evaluation.confirm_after_steps or 0,
        "in_training_s": evaluation.in_training_s or 0.0,
        "share": ((evaluation.after_training_s or 0.0) + (evaluation.in_training_s or 0.0)) / command_s,
        "alone": summary.machine.alone,  # the machine around the run (summary.json machine)
        "other_cpu_share": summary.machine.other_cpu_share,
    }


def policy_steps(curves: list[dict[float, float]], every: int, confirm_after: int, target: dict) -> list[float]:
    """The steps of the workers' common dense curves (step -> value each) that the in-training policy evaluates: every
    `every` steps and `confirm_after` after a pause where all were at the target unconfirmed (job/loop.py), each the
    first dense step at or after its due one, and the start only where some curve's next is at the target (settle_start);
    up to where all confirmed the crossing, else to the last."""
    steps = sorted(set.intersection(*(set(curve) for curve in curves)))
    kept: list[float] = []
    start: float | None = steps[0]

    def keep(step: float) -> list[bool]:
        """Keep `step`; whether each curve confirmed its crossing (before the start joins, as the loop claims it)."""
        nonlocal start
        kept.append(step)
        reached = [crossing_step(kept, [curve[s] for s in kept], target) is not None for curve in curves]
        if start is not None:
            if any(meets(curve[step], target) for curve in curves):
                kept.insert(0, start)
            start = None
        return reached

    due = next_snapshot(0, every, confirm_after, False)
    for step in steps[1:]:
        if due is None or step < due:
            continue
        reached = keep(step)
        if all(reached):
            return kept
        at_target = all(r or meets(curve[step], target) for r, curve in zip(reached, curves))
        due = next_snapshot(int(step), every, confirm_after, at_target)
    if len(steps) == 1:
        return steps
    if not kept or kept[-1] != steps[-1]:
        keep(steps[-1])
    return kept


def crossings(run_dir: Path, every: int, confirm_after: int) -> dict[str, Any]:
    """The worst worker's crossing step by the run's own estimator, from every evaluation it kept (`dense`) and from
    those the policy of `every` and `confirm_after` keeps (policy_steps: `coarse`); None: not reached."""
    run = RunDir(run_dir)
    target = Summary.load(run.summary).target
    metric = target["metric"]
    curves = [[e for e in read_jsonl(peer.evals) if e.get(metric) is not None]
              for peer in run.peers() if peer.evals.exists()]
    curves = [curve for curve in curves if curve]
    by_step = [{e["step"]: e[metric] for e in curve} for curve in curves]
    kept = policy_steps(by_step, every, confirm_after, target) if by_step else []
    worst: dict[str, float | None] = {}
    for name, thin in (("dense", False), ("coarse", True)):
        steps = []
        for curve in by_step:
            at = kept if thin else sorted(curve)
            steps.append(crossing_step(at, [curve[s] for s in at], target))
        worst[name] = max(s for s in steps if s is not None) if steps and None not in steps else None
    dense, coarse = worst["dense"], worst["coarse"]
    shift = (coarse - dense) / every if dense is not None and coarse is not None else None
    gaps = [b["step"] - a["step"] for curve in curves for a, b in zip(curve, curve[1:])]
    return {"run": str(run_dir), "dense_every": min(gaps, default=None),  # None: fewer than two evaluations
            "states": [e.get("state_sha256") for curve in curves for e in curve],
            "dense": dense, "coarse": coarse, "shift_intervals": shift,
            "within": abs(shift) <= 1 if shift is not None else dense is coarse is None}


def crossing_check(folders: list[Path], every: int, confirm_after: int) -> dict[str, Any]:
    """crossings() of every run (a folder holding summary.json) under `folders`, evaluated more densely than `every`."""
    runs = [crossings(s.parent, every, confirm_after) for folder in folders
            for s in sorted(folder.rglob("summary.json"))]
    runs = [r for r in runs if r["dense_every"] is not None and r["dense_every"] < every]
    distinct = {str(r.pop("states")): r for r in runs}  # runs that evaluated the same states read the same crossing
    shifts = [r["shift_intervals"] for r in runs if r["shift_intervals"] is not None]
    return {"every": every, "confirm_after": confirm_after, "folders": [str(f) for f in folders], "runs": len(runs),
            "distinct_curves": len(distinct),
            "within": sum(r["within"] for r in runs), "largest_shift_intervals": max(map(abs, shifts), default=None),
            "median_shift_intervals": statistics.median(shifts) if shifts else None, "by_run": runs}


def measure_once(overrides: list[str], figures: Callable[[Path, float], dict[str, Any]] = figures_of) -> dict[str, Any]:
    """`python train.py` with these overrides as typed (its run folder temporary), timed; figures(run folder, seconds)."""
    with tempfile.TemporaryDirectory(prefix="avgbench-command-") as scratch:
        run_dir = Path(scratch) / "run"
        log = Path(scratch) / "train.log"
        started = time.perf_counter()
        with open(log, "w") as output:
            done = subprocess.run([sys.executable, "train.py", f"hydra.run.dir={run_dir}", *overrides], cwd=ROOT,
                                  stdout=output, stderr=subprocess.STDOUT)
        command_s = time.perf_counter() - started
        if done.returncode:
            raise RuntimeError(f"train.py {' '.join(overrides)} exited {done.returncode}:\n{log.read_text()[-2000:]}")
        return figures(run_dir, command_s)


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
    met = max(shares) <= GOAL
    print(f"evaluation share {mean:.1%} (repeats {', '.join(f'{s:.1%}' for s in shares)}); goal <= {GOAL:.0%}: "
          f"{'met' if met else 'missed'}")
    result = {"name": "evaluation_share", "ratio": mean, "goal": f"<= {GOAL:.0%} of make run's wall clock",
              "goal_met": met,
              "setup": "make run as typed: python train.py " + " ".join(["hydra.run.dir=<temporary>", *args.overrides])
                       + " (conf/config.yaml defaults)",
              "method": methods("bench")["evaluation_share"],
              "repeats": repeats}
    if args.dense:
        check = crossing_check(args.dense, every := repeats[0]["interval_steps"], repeats[0]["confirm_after_steps"])
        if not check["runs"]:
            raise SystemExit(f"evaluation_share: no run under {', '.join(map(str, args.dense))} was evaluated more "
                             f"often than every {every} steps")
        print(f"crossing at every {every} steps against each run's denser evaluations: {check['within']} of "
              f"{check['runs']} runs ({check['distinct_curves']} distinct curves) within one interval (largest shift "
              f"{check['largest_shift_intervals']:.2f} intervals, median {check['median_shift_intervals']:+.2f}); "
              f"goal: all")
        result |= {"crossing_check": check, "crossing_goal": "every recorded run's crossing within one interval of "
                   "its dense evaluation's", "crossing_goal_met": check["within"] == check["runs"],
                   "sweeps": [{"path": path, "kept": False, "summary": "crossing_check"} for path in check["folders"]]}
    elif kept := kept_crossing_check(args.out, repeats[0]["interval_steps"], repeats[0]["confirm_after_steps"]):
        print(f"crossing check at the same interval kept from {kept['crossing_check']['measured_at']}")
        result |= kept
    if not args.no_save:
        print(f"saved {save(recorded(result), args.out)}")


def kept_crossing_check(results: Path, every: int, confirm_after: int) -> dict[str, Any] | None:
    """The saved entry's crossing check, with when and where it was measured, if it read the same policy."""
    saved = load("evaluation_share", results)
    check = saved.body.get("crossing_check") if saved else None
    if not saved or not check or (check["every"], check.get("confirm_after", 0)) != (every, confirm_after):
        return None
    stamp = {"measured_at": check.get("measured_at", saved.measured_at), "machine": check.get("machine", saved.machine)}
    return {"crossing_check": check | stamp, "sweeps": saved.sweeps} | {
        key: saved.body[key] for key in ("crossing_goal", "crossing_goal_met")}


def main() -> int:
    parser = script_parser(__doc__, repeats=2)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides: a variant of the default run")
    parser.add_argument("--dense", type=Path, nargs="+", metavar="FOLDER",
                        help="recorded runs or sweeps evaluated more densely: their crossings at the measured interval")
    return run_script(parser, run)


if __name__ == "__main__":
    sys.exit(main())
