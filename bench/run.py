#!/usr/bin/env python
"""Run the benchmarks (default: all; the others keep their saved entries), print a table of ratios, save each result
as bench/results/NAME.json (bench/results.py); examples in docs/benchmarks.md.

A benchmark's options (--NAME-...) reach its run() as keyword arguments; its result gets its method from
metrics/methods.yaml (bench.MODULE) and replaces the saved entry, unless its module defines merge(kept, new).
Benchmarks hold the machine lock (launchers/lock.py) while they run: --lock refuse exits 2 if another holds it.
"""
import argparse
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.results import RESULTS, recorded, save  # noqa: E402
from job.registry import resolve  # noqa: E402
from launchers.lock import LOCK_MODES, LockRefused, MachineLock  # noqa: E402
from metrics.recording.methods import methods  # noqa: E402
from metrics.summary.schema import Json  # noqa: E402

BENCHMARKS = {
    "overhead": "bench.overhead:run",
    "collectives": "bench.collectives:run",
    "stepwise_vs_ring": "bench.stepwise_vs_ring:run",
    "ddp_overlap": "bench.ddp_overlap:run",
    "sampler": "bench.sampler_cost:run",
    "goodput": "bench.goodput:run",
    "link_cpu": "bench.link_cpu:run",
    "comm_cpu": "bench.comm_cpu:run",
    "projection": "bench.projection:run",
    "thesis": "bench.thesis:run",
    "noise": "bench.noise:run",
    "emulation": "bench.emulation:run",
    "emulation_fidelity": "bench.emulation:fidelity",
    "noise_scale": "bench.noise_scale:run",
    "verdict_simulation": "bench.verdict_simulation:run",
    "pause_shift": "bench.pause_shift:run",
    "quick": "bench.quick:run",
    "reference_cost": "bench.reference_cost:run",
    "reference_variance": "bench.reference_variance:run",
    "field": "bench.field:run",
}


def module_of(spec: str) -> ModuleType:
    return importlib.import_module(spec.split(":")[0])


def merge_of(spec: str) -> Callable[[Json, Json], Json] | None:
    """The `merge` beside a benchmark's run function, or None (its new entry replaces the saved)."""
    return getattr(module_of(spec), "merge", None)


def owner_of(dest: str) -> str | None:
    """The benchmark an option's dest belongs to: the longest name it starts with (noise_scale_grid: noise_scale's)."""
    return max((name for name in BENCHMARKS if dest.startswith(f"{name}_")), key=len, default=None)


def options_of(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """The benchmark's own options that were given (--NAME-...), as keyword arguments of its run()."""
    return {dest.removeprefix(f"{name}_"): value for dest, value in vars(args).items() if owner_of(dest) == name}


def idle_options(args: argparse.Namespace) -> list[str]:
    """The benchmarks given options that the command does not run."""
    return [name for name in BENCHMARKS if args.names and name not in args.names and options_of(name, args)]


def add_saving_options(parser: argparse.ArgumentParser, print_only: bool = True) -> None:
    """Where a benchmark writes its entry (--out), whether (--no-save), and what it does about the machine lock."""
    parser.add_argument("--out", type=Path, default=RESULTS, help="the results folder, one NAME.json per entry")
    if print_only:
        parser.add_argument("--no-save", action="store_true", help="print only")
    parser.add_argument("--lock", choices=LOCK_MODES, default="wait",
                        help="when another benchmark or sweep holds the machine lock: wait (default), refuse, off")


def script_parser(description: str | None, repeats: int | None = None) -> argparse.ArgumentParser:
    """A benchmark script's parser: its docstring, and --repeats (runs one after the other) where given a default."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    if repeats is not None:
        parser.add_argument("--repeats", type=int, default=repeats,
                            help=f"runs, one after the other (default {repeats})")
    return parser


def run_script(parser: argparse.ArgumentParser, run: Callable[[argparse.Namespace], object],
               least: dict[str, int] | None = None) -> int:
    """A benchmark script's main: its saving options, each option of `least` refused below its value (--repeats at
    least 1 where the parser has it), then run(args) under the machine lock."""
    add_saving_options(parser)
    args = parser.parse_args()
    least = ({"repeats": 1} if hasattr(args, "repeats") else {}) | (least or {})
    for name, value in least.items():
        if getattr(args, name) < value:
            parser.error(f"--{name.replace('_', '-')} must be at least {value}")
    return under_machine_lock(args.lock, lambda: run(args))


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help=f"benchmarks to run: {', '.join(BENCHMARKS)} (default: all)")
    add_saving_options(parser, print_only=False)
    added = set()
    for name, spec in BENCHMARKS.items():  # an option not given stays out of args: run()'s default holds
        group = parser.add_argument_group(f"{name} options", argument_default=argparse.SUPPRESS)
        module = module_of(spec)
        if (add_arguments := getattr(module, "add_arguments", None)) and module not in added:
            add_arguments(group)
            added.add(module)
        if grid := getattr(module, "DEFAULT_GRID", None):  # reaches run() as `text`
            group.add_argument(f"--{name}-grid", dest=f"{name}_text", metavar="GRID",
                               help=f"KEY=VALUE words that replace those of the default grid: {grid}")
    return parser


def main() -> int:
    cli = parser()
    args = cli.parse_args()
    if unknown := set(args.names) - set(BENCHMARKS):
        cli.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    if idle := idle_options(args):
        cli.error(f"options given for {', '.join(idle)}, which this command does not run")
    names = args.names or list(BENCHMARKS)
    options = {name: options_of(name, args) for name in names}
    return under_machine_lock(args.lock, lambda: run_benchmarks(names, args.out, options))


def under_machine_lock(mode: str, work: Callable[[], object]) -> int:
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


def run_benchmarks(names: list[str], out: Path, options: dict[str, dict[str, Any]] | None = None) -> None:
    """Run these benchmarks, each with its options (name -> run()'s keyword arguments), and save their results."""
    results = []
    for name in names:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        spec = BENCHMARKS[name]
        result = resolve(spec)(**(options or {}).get(name, {}))
        method = methods("bench").get(name) or methods("bench").get(spec.split(":")[0].removeprefix("bench."))
        results.append(recorded(result | ({"method": method} if method else {})))
        save(results[-1], out, merge_of(spec))
    print(f"\n{'benchmark':<26} {'ratio':>10}  goal               setup")
    for r in results:
        ratio = "n/a" if r.body["ratio"] is None else f"{r.body['ratio']:.4f}"  # e.g. a projection of calibration only
        print(f"{r.name:<26} {ratio:>10}  {r.goal:<18} {r.body['setup']}")
    print(f"\nsaved in {out}")


if __name__ == "__main__":
    sys.exit(main())
