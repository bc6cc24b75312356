"""Framework overhead: strategy=single step time vs the minimal raw loop, same model, data, batch, threads, core."""
import statistics
import subprocess
import sys

from bench.jobs import ROOT, train
from metrics.recording.jsonl import read_jsonl
from metrics.recording.rundir import RunDir


def raw_step_times(model: str, batch: int, steps: int) -> list[float]:
    out = subprocess.run([sys.executable, "-m", "bench.raw_loop", model, str(batch), str(steps), "1", "0"],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    return [float(line) for line in out.stdout.split()]


def framework_step_times(model: str, batch: int, steps: int) -> list[float]:
    with train(f"model={model}", f"batch_size={batch}", f"max_steps={steps}", "eval_every=0", "peer_cpus=1") as run:
        clock = [s["train_s"] for s in read_jsonl(RunDir(run).peer(0).steps)]
    return [b - a for a, b in zip([0.0, *clock], clock)]


def run(model: str = "resnet18", batch: int = 32, steps: int = 25, warmup: int = 5, repeats: int = 3) -> dict:
    raw, framework = [], []
    for _ in range(repeats):
        raw.append(statistics.median(raw_step_times(model, batch, steps)[warmup:]))
        framework.append(statistics.median(framework_step_times(model, batch, steps)[warmup:]))
    return {
        "name": "framework_overhead",
        "ratio": statistics.median(r / f for r, f in zip(raw, framework)),
        "goal": ">= 0.97",
        "raw_step_s": raw,
        "framework_step_s": framework,
        "setup": f"model={model} batch={batch} steps={steps} warmup={warmup} repeats={repeats}, 1 thread, core 0",
    }
