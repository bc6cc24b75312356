#!/usr/bin/env python
"""The primary figure's noise of sweeps already run (metrics/report/noise.py), recorded for planning: a row replaces
the saved row of the same figure, target, data, model and strategy in bench/results/primary_noise.json, and
conf/evidence.json, which `repeats=auto` plans from, gets it too (examples: docs/report.md).
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.results import RESULTS, BenchResult, load, portable, save  # noqa: E402
from metrics.report.noise import ENTRY, measured_rows, merged, recorded_lines  # noqa: E402


def record(dirs: list[Path], out: Path, write: bool = True) -> list[str]:
    """Measure the noise under dirs, save it into out's entry (if write); what was recorded, a line a row."""
    rows = portable(measured_rows(dirs))
    if write and rows:
        saved = load(ENTRY, out)
        save(BenchResult.of(merged(saved.body if saved else None, rows)), out)
    return recorded_lines(rows, str(out / f"{ENTRY}.json") if write else "nothing (--no-save)", dirs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="+", type=Path, help="sweep directories")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the results folder, one NAME.json per entry")
    parser.add_argument("--no-save", action="store_true", help="print only")
    args = parser.parse_args()
    print("\n".join(record(args.dirs, args.out, not args.no_save)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
