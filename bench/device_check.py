#!/usr/bin/env python
"""Device check: the ResNet18 job under `single` (one process) and a 2-process `allreduce` on this machine's
device, `--repeats` times each, alternated, their figures as JSON in an output folder (docs/usage.md). For a lent GPU
machine: `python bench/device_check.py "$OUT"`; exits 1 when a run failed (its error is in the JSON), 2 on bad input.
Back here, `--record OUT/device_check.json` saves it as bench/results/device_check.json, with the machine it ran on.
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench.jobs import run_train  # noqa: E402
from bench.results import RESULTS, BenchResult, portable, save  # noqa: E402
from job.device import PeerDevice, resolve_device  # noqa: E402
from job.errors import ConfigError  # noqa: E402
from launchers.config import group_options  # noqa: E402
from metrics.recording.jsonl import read_jsonl  # noqa: E402
from metrics.recording.machine import fingerprint  # noqa: E402
from metrics.recording.rundir import PeerDir, RunDir  # noqa: E402
from metrics.recording.steplog import PHASES  # noqa: E402
from metrics.recording.methods import methods  # noqa: E402
from metrics.summary.schema import Summary  # noqa: E402

ALLREDUCE_PEERS = 2
METHODS = methods("device_check")


def plan(device: str, gpus: int, model: str, steps: int, batch_size: int) -> list[dict]:
    """The two runs on `device` (cpu or cuda) with `gpus` GPUs: their names, overrides and allreduce's backend."""
    warmup = warmup_steps(steps)
    job = [f"model={model}", f"device={device}", f"max_steps={steps}", f"batch_size={batch_size}",
           "network=loopback", "eval_every=0", "precise_bn_samples=0",
           f"measure_window.after_step={warmup}", f"measure_window.steps={steps - warmup}"]
    peer = PeerDevice(torch.device(device, 0) if device == "cuda" else torch.device("cpu"),
                      gpu_shared=device == "cuda" and ALLREDUCE_PEERS > gpus)
    return [{"name": "single", "overrides": ["strategy=single", "peers=1", *job], "backend": None},
            {"name": "allreduce", "overrides": ["strategy=allreduce", f"peers={ALLREDUCE_PEERS}", *job],
             "backend": peer.collective_backend}]


def warmup_steps(steps: int) -> int:
    """Steps left out of the steady step time: a fifth of the run, at least 1, never all."""
    return min(max(1, steps // 5), steps - 1)


def figures(run_dir: Path) -> dict:
    """What a completed run measured (METHODS says how)."""
    summary = Summary.load(RunDir(run_dir).summary)
    steps = read_jsonl(PeerDir(run_dir / "peer0").steps)
    skip = warmup_steps(len(steps))
    return {"samples_per_s": summary.throughput_samples_per_s,
            "step_s_mean": sum(summary.time_breakdown_s.values()),
            "step_s_steady": statistics.median(sum(s[p] for p in PHASES) for s in steps[skip:]),
            "warmup_steps": skip, "steps": len(steps),
            "time_breakdown_s": summary.time_breakdown_s, "time_breakdown_share": summary.time_breakdown_share,
            "device": summary.device.to_dict(), "workers": summary.workers}


def check(out: Path, device: str, model: str, steps: int, batch_size: int, budget_s: float,
          repeats: int) -> dict[str, Any]:
    resolved = resolve_device(device)
    gpus = torch.cuda.device_count() if resolved == "cuda" else 0
    result: dict[str, Any] = {"device": resolved, "gpus": [torch.cuda.get_device_name(i) for i in range(gpus)],
                              "torch": torch.__version__, "cuda": torch.version.cuda, "model": model, "steps": steps,
                              "batch_size_per_peer": batch_size, "repeats": repeats, "methods": METHODS, "runs": [],
                              "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": fingerprint()}
    deadline = time.monotonic() + budget_s
    runs = [run | {"repeat": k} for k in range(repeats) for run in plan(resolved, gpus, model, steps, batch_size)]
    for i, run in enumerate(runs):
        run_dir = out / "runs" / f"{run['name']}-{run['repeat']}"
        entry = {"name": run["name"], "repeat": run["repeat"], "overrides": run["overrides"],
                 "backend": run["backend"], "run_dir": str(run_dir)}
        started = time.monotonic()
        timeout = (deadline - started) / (len(runs) - i)  # this run's share of what is left
        try:
            run_train(run_dir, *run["overrides"], timeout=timeout)
            entry |= figures(run_dir)
        except Exception as exc:  # recorded, and the exit status says so: the other runs still run
            entry["error"] = f"{type(exc).__name__}: {exc}"
        entry["wall_s"] = time.monotonic() - started
        result["runs"].append(entry)
    result["spread"] = spread(result["runs"])
    return result


def spread(runs: list[dict]) -> dict[str, dict]:
    """Per strategy, over its completed repeats: the median, least and most of samples/s and of the steady step."""
    found = {}
    for name in dict.fromkeys(r["name"] for r in runs):
        done = [r for r in runs if r["name"] == name and "error" not in r]
        found[name] = {"completed": len(done)} | {
            figure: {"median": statistics.median(values), "min": min(values), "max": max(values)}
            for figure in ("samples_per_s", "step_s_steady") if (values := [r[figure] for r in done])}
    return found


def record(path: Path, folder: Path = RESULTS) -> Path:
    """Save a device check's JSON as folder/device_check.json, stamped with the machine it ran on."""
    result = json.loads(path.read_text())
    failed = [f"{r['name']}-{r['repeat']}" for r in result["runs"] if "error" in r]
    return save(BenchResult.of(portable({
        "name": "device_check", "ratio": None, "sweeps": [],
        "goal": "the ResNet18 job trains on the machine's device under single and a 2-process allreduce, every run "
                "completed, its figures recorded",
        "goal_met": not failed, "failed": failed,
        "setup": f"{result['model']}, {result['steps']} steps of {result['batch_size_per_peer']} samples per peer, "
                 f"device {result['device']} ({', '.join(result['gpus']) or 'no GPU'}), torch {result['torch']}, "
                 f"CUDA {result['cuda']}, loopback, {result['repeats']} repeats alternated",
        "method": "bench/device_check.py on the lent machine; its `methods` say how each figure is measured",
    } | {key: result[key] for key in ("measured_at", "machine", "spread", "runs", "methods")})), folder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path, nargs="?", help="output folder (created): device_check.json and runs/")
    parser.add_argument("--record", type=Path, metavar="JSON",
                        help="instead: save this device_check.json as bench/results/device_check.json")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda (auto: cuda where torch sees a GPU)")
    parser.add_argument("--model", default="resnet18", help="a conf/model option")
    parser.add_argument("--steps", type=int, default=200, help="steps per peer of each run")
    parser.add_argument("--batch-size", type=int, default=128, help="samples per peer and step")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each strategy, alternated")
    parser.add_argument("--budget-s", type=float, default=480, help="all runs together, seconds (default 8 minutes)")
    args = parser.parse_args(argv)
    if args.record:
        print(f"device_check: saved {record(args.record)}")
        return 0
    try:
        if args.out is None:
            raise ConfigError("give an output folder (or --record JSON)")
        if args.steps < 2 or args.batch_size < 1 or args.budget_s <= 0 or args.repeats < 1:
            raise ConfigError(f"--steps must be >= 2, --batch-size >= 1, --budget-s > 0 and --repeats >= 1; got "
                              f"{args.steps}, {args.batch_size}, {args.budget_s}, {args.repeats}")
        built_in = [m for m in group_options("model") if m != "custom"]
        if args.model not in built_in:
            raise ConfigError(f"--model {args.model}: not a built-in conf/model option ({', '.join(built_in)})")
        resolve_device(args.device)
    except ConfigError as exc:
        print(f"device_check: error: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    result = check(args.out, args.device, args.model, args.steps, args.batch_size, args.budget_s, args.repeats)
    text = json.dumps(result, indent=2)
    (args.out / "device_check.json").write_text(text + "\n")
    print(text)
    return 1 if any("error" in r for r in result["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
