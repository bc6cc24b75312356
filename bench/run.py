#!/usr/bin/env python
"""Run the benchmarks, print a table of ratios, save them as JSON.

    python bench/run.py                     # all
    python bench/run.py overhead sampler    # some
    python bench/run.py --out results.json
"""
import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from job.registry import resolve  # noqa: E402

BENCHMARKS = {
    "overhead": "bench.overhead:run",
    "collectives": "bench.collectives:run",
    "stepwise_vs_ring": "bench.stepwise_vs_ring:run",
    "ddp_overlap": "bench.ddp_overlap:run",
    "sampler": "bench.sampler_cost:run",
    "projection": "bench.projection:run",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help=f"benchmarks to run: {', '.join(BENCHMARKS)} (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results.json")
    args = parser.parse_args()
    unknown = set(args.names) - set(BENCHMARKS)
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    results = []
    for name in args.names or BENCHMARKS:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        results.append(resolve(BENCHMARKS[name])())
    print(f"\n{'benchmark':<26} {'ratio':>10}  goal               setup")
    for r in results:
        print(f"{r['name']:<26} {r['ratio']:>10.4f}  {r['goal']:<18} {r['setup']}")
    args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M:%S"), "results": results}, indent=1))
    print(f"\nsaved {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
