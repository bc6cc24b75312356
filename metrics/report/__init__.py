"""Comparison report over runs: report.html (self-contained, plots embedded), report.md, runs.csv.

    python -m metrics.report DIR [DIR ...] [-o OUT] [--project lan:8 ...]"""
import argparse
from pathlib import Path

from metrics.recording.rundir import SWEEP_PLAN
from metrics.report.build import NoRuns, build
from metrics.report.noise import write_sweep_noise
from metrics.report.model import Report
from metrics.report.projected import parse_targets
from metrics.report.render import answer_text, write


def build_report(sources: list[Path], out_dir: Path,
                 project: list[str] | None = None) -> tuple[Report, dict[str, Path]]:
    """Write report.html, report.md and runs.csv into out_dir (project: LINK:N targets to project to); the report and
    their paths. A sweep's report in its own folder also writes the noise it measured, the next plan's row on its
    machine."""
    report = build(sources, project)
    paths = write(report, out_dir)
    if sources == [out_dir] and (out_dir / SWEEP_PLAN).is_file():
        write_sweep_noise(out_dir)
    return report, paths


def announce(report: Report, paths: dict[str, Path]) -> None:
    """The answer and the comparisons in the terminal, then where the report is."""
    print(f"{answer_text(report)}\n\navgbench: comparison report: {paths['html']} (also report.md, runs.csv)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m metrics.report", description=__doc__.split("\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="run or multirun directories")
    parser.add_argument("-o", "--out", type=Path, help="output directory (default: DIR when only one is given)")
    parser.add_argument("--project", nargs="+", default=[], metavar="LINK:N",
                        help="also project each averaging configuration to N peers on LINK (e.g. lan:8 1000,0.2:16), "
                             "a cluster's shape after N as :FIELD=VALUE (e.g. 10000:16:devices-per-node=8:"
                             "intra-node-link=100000:ps-servers=2; docs/projection.md)")
    args = parser.parse_args(argv)
    try:
        parse_targets(args.project)
    except ValueError as exc:
        parser.exit(2, f"avgbench: error: {exc}\n")
    missing = [d for d in args.dirs if not d.is_dir()]
    if missing:
        parser.exit(2, f"avgbench: error: not a directory: {', '.join(map(str, missing))}\n")
    if args.out is None and len(args.dirs) > 1:
        parser.exit(2, "avgbench: error: several directories: name the output directory with -o OUT\n")
    try:
        report = build(args.dirs, args.project)
    except NoRuns as exc:
        parser.exit(2, f"avgbench: error: {exc}\n")
    announce(report, write(report, args.out or args.dirs[0]))
    return 0
