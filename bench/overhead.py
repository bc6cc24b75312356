"""Framework overhead against the engines' own loops: `single` against a plain torch loop, `allreduce` (DDP over gloo)
against a plain DDP loop started by torch.distributed.run, `ring` against a plain Horovod loop started by horovodrun
(bench/raw_loop.py). Same model form, data, batch, threads and cores, on loopback; each comparison's raw and
framework runs alternate in ABBA pairs. Per pair: raw median step time / framework median step time after the
warm-up (>= 1: no overhead); a comparison's figure is their geometric mean with its 95 % t-interval."""
import argparse
import os
import re
import statistics
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from bench.jobs import ROOT, abba, train
from metrics.recording.jsonl import read_jsonl
from metrics.recording.rundir import RunDir
from metrics.report.stats import Ratio

PAIRS = 24  # per-pair noise on the 2-core machine, 0.88-1.14, needs about 20-30 pairs
STEPS, WARMUP = 25, 5  # steps per run; the first WARMUP are left out
GOAL = 0.97  # each comparison's point estimate, with its interval's lower bound stated
RAW_MODES = {"single": "plain", "allreduce": "ddp", "ring": "horovod"}  # framework strategy -> raw_loop's mode
STEP_LINE = re.compile(r"step_s (\S+)")


def launcher(mode: str) -> list[str]:
    """The command that starts raw_loop's ranks in this mode: its engine's own launcher, 2 ranks on loopback."""
    if mode == "ddp":
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    if mode == "horovod":  # horovodrun's arguments as strategy=ring gives them
        from launchers.config import compose_config
        from strategies.ring import Ring

        spec = Ring.launch_spec(compose_config(["strategy=ring", "peers=2", "peer_cpus=1", "network=loopback"]))
        return [sys.executable, "-m", "horovod.runner.launch", "-np", "2", *spec.host_args, *spec.launcher_args,
                sys.executable]
    return [sys.executable]


def raw_step_times(mode: str, model: str, batch: int, steps: int) -> list[float]:
    command = [*launcher(mode), "-m", "bench.raw_loop", model, str(batch), str(steps), "1", mode]
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900,
                         env=os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    if out.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{out.stderr[-2000:]}")
    return [float(seconds) for seconds in STEP_LINE.findall(out.stdout)]


def framework_step_times(strategy: str, model: str, batch: int, steps: int) -> list[float]:
    peers = 1 if strategy == "single" else 2
    with train(f"strategy={strategy}", f"peers={peers}", f"model={model}", f"batch_size={batch}",
               f"max_steps={steps}", "eval_every=0", "peer_cpus=1", "network=loopback") as run:
        clock = [s["train_s"] for s in read_jsonl(RunDir(run).peer(0).steps)]
    return [b - a for a, b in zip([0.0, *clock], clock)]


def compare(pairs: int, raw: Callable[[], list[float]], framework: Callable[[], list[float]],
            warmup: int = WARMUP) -> dict[str, Any]:
    """Runs raw() and framework() (each: its step times) in ABBA pairs; the ratio of each pair's medians after the
    warm-up, raw / framework, and their geometric mean with its 95 % interval."""
    raw_runs, framework_runs = abba(pairs, lambda is_raw: raw() if is_raw else framework())
    per_pair = [statistics.median(r[warmup:]) / statistics.median(f[warmup:])
                for r, f in zip(raw_runs, framework_runs, strict=True)]
    ratio = Ratio(per_pair)
    return {"ratio": ratio.estimate, "interval_95": ratio.interval(), "pairs": pairs,
            "goal_met": ratio.estimate >= GOAL, "per_pair": per_pair}


def add_arguments(group: argparse._ActionsContainer) -> None:
    group.add_argument("--overhead-pairs", dest="overhead_pairs", type=int, metavar="N",
                       help=f"ABBA pairs per comparison (default {PAIRS})")
    group.add_argument("--overhead-steps", dest="overhead_steps", type=int, metavar="N",
                       help=f"steps per run, the first {WARMUP} left out (default {STEPS})")


def run(pairs: int = PAIRS, steps: int = STEPS, model: str = "resnet18", batch: int = 32) -> dict[str, Any]:
    if steps <= WARMUP:
        raise ValueError(f"--overhead-steps must exceed the {WARMUP} warm-up steps")
    comparisons = {strategy: compare(pairs, lambda: raw_step_times(mode, model, batch, steps),
                                     lambda: framework_step_times(strategy, model, batch, steps))
                   | {"raw_loop": mode} for strategy, mode in RAW_MODES.items()}
    return {
        "name": "framework_overhead",
        "ratio": min(c["ratio"] for c in comparisons.values()),  # the largest overhead
        "goal": f">= {GOAL} each",
        "goal_met": all(c["goal_met"] for c in comparisons.values()),
        "comparisons": comparisons,
        "setup": f"model={model} batch={batch} steps={steps} warmup={WARMUP} pairs={pairs}, 1 thread and core per "
                 f"rank, 2 ranks for allreduce and ring, loopback",
    }
