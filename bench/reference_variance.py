"""Does the speed reference explain the noise? On recorded sweeps, the share of the variance of the paired
log ratios that the reference's paired log ratio explains."""
import argparse
import math
import random
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from bench.results import portable
from metrics.report.baselines import load_runs
from metrics.report.compare import block_runs, compare
from metrics.report.primary import THROUGHPUT, Primary
from metrics.report.runs import Run
from metrics.report.verdict import analyse

GOAL = 0.5
BOOTSTRAP = 2000
HEADLINE = ["strategy=ring,stepwise,ps"]
CONTROL_BOUND = math.log(1.05)


def command_of(folder: Path) -> list[str]:
    """The sweep's command line overrides (its multirun.yaml), less the machine lock's."""
    task = yaml.safe_load((folder / "multirun.yaml").read_text())["hydra"]["overrides"]["task"]
    return [word for word in task if not word.startswith("lock=")]


def reference_s(runs: list[Run]) -> float | None:
    """The runs' speed reference (geometric mean of their summaries' median_s), None where one has none."""
    found = [r.summary.speed_reference.median_s for r in runs]
    known = [v for v in found if v]
    return statistics.geometric_mean(known) if found and len(known) == len(found) else None


def pairs_of(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """figure -> one row per comparison and block observed exactly: comparison, block, y, x."""
    sections, _ = load_runs([folder])
    found: dict[str, list[dict[str, Any]]] = {"time_to_target": [], THROUGHPUT: []}
    for section in sections:
        analysis = analyse(section)
        compared = [c for c in analysis.comparisons if c.other is c.this.baseline] + analysis.controls
        for figure, primary in (("time_to_target", analysis.primary), (THROUGHPUT, Primary(THROUGHPUT))):
            if figure == "time_to_target" and not primary.is_time:
                continue
            for declared in compared:
                control = declared in analysis.controls
                c = compare(declared.this, declared.other, primary)
                ours, theirs = block_runs(c.this), block_runs(c.other)
                for block, y in c.exact_logs.items():
                    mine, yours = reference_s(ours[block]), reference_s(theirs[block])
                    if mine and yours:
                        found[figure].append({"comparison": f"{c.this.label} / {c.other.label}",
                                              "control": control, "sweep": folder.name,
                                              "block": block[1], "y": y, "x": math.log(yours / mine)})
    return found


def centred(rows: list[dict]) -> list[tuple[float, float]]:
    """(y, x) of each row less its comparison's means (per sweep: each sweep's comparison is its own)."""
    groups: dict = {}
    for row in rows:
        groups.setdefault((row["sweep"], row["comparison"]), []).append(row)
    out = []
    for members in groups.values():
        if len(members) < 2:
            continue
        my, mx = statistics.fmean(r["y"] for r in members), statistics.fmean(r["x"] for r in members)
        out += [(r["y"] - my, r["x"] - mx) for r in members]
    return out


def explained(rows: list[dict]) -> dict | None:
    """r², slope, the share the slope-1 adjustment removes, sd before and after; None: nothing to explain."""
    points = centred(rows)
    syy = sum(y * y for y, _ in points)
    sxx = sum(x * x for _, x in points)
    if not points or syy == 0:
        return None
    sxy = sum(y * x for y, x in points)
    left = sum((y - x) ** 2 for y, x in points)
    dof = len(points) - len({(r["sweep"], r["comparison"]) for r in rows})  # one mean per comparison
    return {"r2": sxy * sxy / (sxx * syy) if sxx else 0.0, "slope": sxy / sxx if sxx else None,
            "adjusted_share": 1 - left / syy, "log_sd_before": math.sqrt(syy / max(dof, 1)),
            "log_sd_after": math.sqrt(left / max(dof, 1)), "pairs": len(points)}


def r2_interval(rows: list[dict], draws: int = BOOTSTRAP, seed: int = 0) -> list[float] | None:
    """95 % percentile interval of r², each sweep's blocks resampled with replacement."""
    blocks: dict = {}
    for row in rows:
        blocks.setdefault(row["sweep"], {}).setdefault(row["block"], []).append(row)
    rng, found = random.Random(seed), []
    for _ in range(draws):
        sample = []
        for sweep, by_block in blocks.items():
            keys = list(by_block)
            for i, key in enumerate(rng.choices(keys, k=len(keys))):  # a block drawn twice counts as two blocks
                sample += [r | {"block": (key, i)} for r in by_block[key]]
        if (figures := explained(sample)) is not None:
            found.append(figures["r2"])
    if len(found) < draws / 2:
        return None
    found.sort()
    return [found[int(0.025 * len(found))], found[int(0.975 * len(found)) - 1]]


def figure_entry(rows: list[dict]) -> dict:
    figures = explained(rows)
    if figures is None:
        return {"pairs": 0}
    controls = [r for r in rows if r["control"]]
    return figures | {"r2_interval_95": r2_interval(rows), "comparisons": len({r["comparison"] for r in rows}),
                      "control_largest_adjusted": max((abs(r["y"] - r["x"]) for r in controls), default=None),
                      "control_within_bound": all(abs(r["y"] - r["x"]) <= CONTROL_BOUND for r in controls)
                      if controls else None,
                      "rows": rows}


def run(from_: Sequence[str] = ()) -> dict[str, Any]:
    folders = [Path(f) for f in from_]
    if not folders:
        raise ValueError("give the recorded sweeps: --reference_variance-from DIR [DIR ...]")
    by_figure: dict[str, list[dict[str, Any]]] = {"time_to_target": [], THROUGHPUT: []}
    for folder in folders:
        for figure, rows in pairs_of(folder).items():
            by_figure[figure] += rows
    figures = {figure: figure_entry(rows) for figure, rows in by_figure.items()}
    by_sweep = {folder.name: {figure: {k: v for k, v in figure_entry([r for r in rows if r["sweep"] == folder.name]
                                                                      ).items() if k != "rows"}
                              for figure, rows in by_figure.items()} for folder in folders}
    commands = {folder.name: command_of(folder) for folder in folders}
    on_headline = all(c == HEADLINE for c in commands.values())
    r2 = figures["time_to_target"].get("r2")
    return {
        "name": "reference_variance",
        "ratio": r2,
        "goal": f"r² >= {GOAL} of time-to-target's paired log-ratio variance (headline sweeps)",
        "goal_met": (r2 is not None and r2 >= GOAL) if on_headline else None,
        "on_headline": on_headline,
        "figures": figures,
        "by_sweep": by_sweep,
        "commands": commands,
        "sweeps": [{"path": portable(str(f.resolve())), "kept": False, "summary": "figures"} for f in folders],
        "setup": "; ".join(f"{name}: {' '.join(c)}" for name, c in commands.items()),
    }


def add_arguments(group: argparse._ActionsContainer) -> None:
    group.add_argument("--reference_variance-from", dest="reference_variance_from_", nargs="+", metavar="DIR",
                       help="the recorded sweeps' folders")
