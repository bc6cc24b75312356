#!/usr/bin/env python
"""Run the benchmarks, print a table of ratios, save them as JSON.

    python bench/run.py                     # all
    python bench/run.py overhead sampler    # some (the file keeps the others' last results)
    python bench/run.py --out results.json
    python bench/run.py --lock refuse       # exit 2 if another benchmark or sweep holds the machine lock

Each result records when and on which machine it was measured; it replaces the benchmark's saved
entry, except where the benchmark's module defines merge(kept, new) (projection: a new run replaces
only the rows of the cases it ran). Benchmarks hold the machine lock (launchers/lock.py) while they
run: another benchmark or sweep waits (or refuses) meanwhile.
"""
import argparse
import importlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from job.registry import resolve  # noqa: E402
from launchers.lock import LOCK_MODES, LockRefused, MachineLock  # noqa: E402

BENCHMARKS = {
    "overhead": "bench.overhead:run",
    "collectives": "bench.collectives:run",
    "stepwise_vs_ring": "bench.stepwise_vs_ring:run",
    "ddp_overlap": "bench.ddp_overlap:run",
    "sampler": "bench.sampler_cost:run",
    "projection": "bench.projection:run",
    "thesis": "bench.thesis:run",
    "noise": "bench.noise:run",
    "emulation": "bench.emulation:run",
    "simgrid": "bench.simgrid:run",
}


def machine() -> str:
    """The machine a result was measured on: cores, memory, CPU model (family, model, clock), GPU, load when it ended."""
    import os

    import psutil
    import torch

    first_cpu = open("/proc/cpuinfo").read().split("\n\n")[0]
    cpu = {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in first_cpu.splitlines())}
    # the model name alone does not tell two hosts apart (two 2-core "AMD EPYC" machines ran ResNet18 1.75x apart)
    model = (f"{cpu.get('model name', 'unknown CPU')}, family {cpu.get('cpu family', '?')} model {cpu.get('model', '?')}"
             f" at {float(cpu.get('cpu MHz', 0)):.0f} MHz")
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (f"{len(os.sched_getaffinity(0))} cores ({model}), {psutil.virtual_memory().total / 2**30:.0f} GiB, "
            f"{gpu}, load average {os.getloadavg()[0]:.1f}")


def save(path: Path, results: list[dict], merges: dict | None = None) -> None:
    """Replace these benchmarks' entries in the results file; the others keep theirs (with their dates).
    merges: result name -> merge(kept entry, new entry) for a benchmark that combines a new run with its
    saved entry instead (projection: rows of other cases stay)."""
    kept = json.loads(path.read_text())["results"] if path.exists() else []
    saved = {r["name"]: r for r in kept}
    merges = merges or {}
    new = [merges[r["name"]](saved[r["name"]], r) if r["name"] in merges and r["name"] in saved else r
           for r in results]
    names = {r["name"] for r in results}
    path.write_text(json.dumps({"results": [r for r in kept if r["name"] not in names] + new}, indent=1) + "\n")


def merge_of(spec: str):
    """The `merge` beside a benchmark's run function ("module:run"), or None: its new entry replaces the saved."""
    return getattr(importlib.import_module(spec.split(":")[0]), "merge", None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help=f"benchmarks to run: {', '.join(BENCHMARKS)} (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results.json")
    parser.add_argument("--lock", choices=LOCK_MODES, default="wait",
                        help="when another benchmark or sweep holds the machine lock: wait (default), refuse, off")
    args = parser.parse_args()
    unknown = set(args.names) - set(BENCHMARKS)
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    return under_machine_lock(args.lock, lambda: run_benchmarks(args.names or list(BENCHMARKS), args.out))


def under_machine_lock(mode: str, work) -> int:
    """work() while holding the machine lock; 0, or 2 when `mode` is refuse and another holds it (named)."""
    lock = MachineLock()
    try:
        lock.acquire(mode)
    except LockRefused as exc:
        print(exc, file=sys.stderr)
        return 2
    try:
        work()
    finally:
        lock.release()
    return 0


def run_benchmarks(names: list[str], out: Path) -> None:
    results, merges = [], {}
    for name in names:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        results.append(resolve(BENCHMARKS[name])() | {"measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
                                                     "machine": machine()})
        if merge := merge_of(BENCHMARKS[name]):
            merges[results[-1]["name"]] = merge
    print(f"\n{'benchmark':<26} {'ratio':>10}  goal               setup")
    for r in results:
        ratio = "n/a" if r["ratio"] is None else f"{r['ratio']:.4f}"  # e.g. a projection run of calibration cases only
        print(f"{r['name']:<26} {ratio:>10}  {r['goal']:<18} {r['setup']}")
    save(out, results, merges)
    print(f"\nsaved {out}")


if __name__ == "__main__":
    sys.exit(main())
