#!/usr/bin/env python
"""Run the benchmarks, print a table of ratios, save them as JSON.

    python bench/run.py                     # all
    python bench/run.py overhead sampler    # some (the file keeps the others' last results)
    python bench/run.py --out results.json
    python bench/run.py --lock refuse       # exit 2 if another benchmark or sweep holds the machine lock
    python bench/run.py thesis --thesis-families hivemind --thesis-dir multirun/thesis   # a benchmark's options

A benchmark's own options are named --NAME-...: its module's add_arguments(parser) declares them, and run() gets
each given one as a keyword argument (the option's dest less its NAME_ prefix); options left out keep run()'s
defaults.

Each result records when and on which machine it was measured (metrics/recording/machine.py fingerprint(): the one fingerprint), the sweeps it
rests on, and no absolute path (bench/results.json moves between machines); it replaces the benchmark's saved
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
from metrics.recording.evidence import refresh_if_record  # noqa: E402
from metrics.recording.machine import fingerprint  # noqa: E402

BENCHMARKS = {
    "overhead": "bench.overhead:run",
    "collectives": "bench.collectives:run",
    "stepwise_vs_ring": "bench.stepwise_vs_ring:run",
    "ddp_overlap": "bench.ddp_overlap:run",
    "sampler": "bench.sampler_cost:run",
    "goodput": "bench.goodput:run",
    "link_cpu": "bench.link_cpu:run",
    "projection": "bench.projection:run",
    "thesis": "bench.thesis:run",
    "noise": "bench.noise:run",
    "emulation": "bench.emulation:run",
    "noise_scale": "bench.noise_scale:run",
    "verdict_simulation": "bench.verdict_simulation:run",
    "pause_shift": "bench.pause_shift:run",
    "quick": "bench.quick:run",
    "reference_cost": "bench.reference_cost:run",
    "reference_variance": "bench.reference_variance:run",
    "field": "bench.field:run",
}


def portable(value, root: Path = ROOT):
    """The value with every absolute path made relative to the repository (results.json holds no machine's paths);
    a path outside the repository keeps only its name, marked as such."""
    if isinstance(value, dict):
        return {key: portable(item, root) for key, item in value.items()}
    if isinstance(value, list):
        return [portable(item, root) for item in value]
    if isinstance(value, str) and value.startswith("/") and " " not in value:
        path = Path(value)
        return str(path.relative_to(root)) if path.is_relative_to(root) else f"outside the repository: {path.name}"
    return value


def stamped(value, fingerprint: dict):
    """Every dict of a new result that carries its own measured_at (a row, a family) gets this machine's fingerprint."""
    if isinstance(value, dict):
        value = {key: stamped(item, fingerprint) for key, item in value.items()}
        return value if "measured_at" not in value or "machine" in value else value | {"machine": fingerprint}
    if isinstance(value, list):
        return [stamped(item, fingerprint) for item in value]
    return value


def recorded(result: dict) -> dict:
    """A benchmark's result as saved: when and where it was measured, the sweeps it rests on (each named, with the key
    of this entry that keeps its summary; none for benchmarks whose runs are temporary), paths relative."""
    machine = fingerprint()
    result = {"sweeps": []} | result | {"measured_at": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine}
    return portable(stamped(result, machine))


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
    refresh_if_record(path)


def module_of(spec: str):
    """The module of a benchmark's run function ("module:run")."""
    return importlib.import_module(spec.split(":")[0])


def merge_of(spec: str):
    """The `merge` beside a benchmark's run function ("module:run"), or None: its new entry replaces the saved."""
    return getattr(module_of(spec), "merge", None)


def owner_of(dest: str) -> str | None:
    """The benchmark an option's dest belongs to: the longest name it starts with (noise_scale_grid: noise_scale's)."""
    return max((name for name in BENCHMARKS if dest.startswith(f"{name}_")), key=len, default=None)


def options_of(name: str, args: argparse.Namespace) -> dict:
    """The benchmark's own options that were given (--NAME-...), as keyword arguments of its run()."""
    return {dest.removeprefix(f"{name}_"): value for dest, value in vars(args).items() if owner_of(dest) == name}


def idle_options(args: argparse.Namespace) -> list[str]:
    """The benchmarks given options that the command does not run."""
    return [name for name in BENCHMARKS if args.names and name not in args.names and options_of(name, args)]


def add_saving_options(parser: argparse.ArgumentParser, print_only: bool = True) -> None:
    """Where a benchmark writes its entry (--out), whether (--no-save), and what it does about the machine lock."""
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results.json")
    if print_only:
        parser.add_argument("--no-save", action="store_true", help="print only")
    parser.add_argument("--lock", choices=LOCK_MODES, default="wait",
                        help="when another benchmark or sweep holds the machine lock: wait (default), refuse, off")


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help=f"benchmarks to run: {', '.join(BENCHMARKS)} (default: all)")
    add_saving_options(parser, print_only=False)
    for name, spec in BENCHMARKS.items():
        if add_arguments := getattr(module_of(spec), "add_arguments", None):
            add_arguments(parser.add_argument_group(f"{name} options"))
    return parser


def main() -> int:
    cli = parser()
    args = cli.parse_args()
    unknown = set(args.names) - set(BENCHMARKS)
    if unknown:
        cli.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    if idle := idle_options(args):
        cli.error(f"options given for {', '.join(idle)}, which this command does not run")
    names = args.names or list(BENCHMARKS)
    options = {name: options_of(name, args) for name in names}
    return under_machine_lock(args.lock, lambda: run_benchmarks(names, args.out, options))


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


def run_benchmarks(names: list[str], out: Path, options: dict[str, dict] | None = None) -> None:
    """Run these benchmarks, each with its options (name -> run()'s keyword arguments), and save their results."""
    results, merges = [], {}
    for name in names:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        results.append(recorded(resolve(BENCHMARKS[name])(**(options or {}).get(name, {}))))
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
