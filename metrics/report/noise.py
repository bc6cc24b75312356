"""The primary figure's noise, recorded for planning (bench/primary_noise.py: the `primary_noise` entry; its method
in metrics/methods.yaml; a sweep's report writes its own as candidate rows, write_sweep_noise), and read back by a
sweep's plan (planning_noise): its machine's rows, else a conservative prior."""
import json
import math
import re
import statistics
import time
from pathlib import Path
from collections.abc import Sequence
from typing import Any, NamedTuple

from metrics.recording.machine import describe_machine, fingerprint, same_machine
from metrics.recording.methods import methods
from metrics.report.baselines import averaging, load_runs, tool_command
from metrics.report.compare import Comparison
from metrics.report.primary import Primary, time_observation
from metrics.report.runs import Block, Group, RunFigure, Section
from metrics.report.stats import (BASIS, EVERY_MACHINE, OWN_MACHINE, PRIOR, PRIOR_INFLATION, blocks_for,
                                  pooled_log_sd, upper_log_sd)
from metrics.report.verdict import analyse
from metrics.summary.schema import Json

ENTRY = "primary_noise"
METHOD = methods("primary_noise")["method"]  # how a row is measured, recorded with the entry
KEYS = ("figure", "metric", "value", "estimator", "data", "model", "strategy")
TEN_PERCENT = 1.10  # a row's blocks_for_10pct: the blocks x/÷1.10 needs at 80 % power (plans: report.smallest_effect)
SWEEP_NOISE = Path(".avgbench") / "primary_noise.json"  # in a sweep folder: its report's measured rows (candidates)


def seed_log_sd(logs: dict[Block, float], seed_of: dict[Block, Any]) -> tuple[float | None, int]:
    """The sd of the paired log ratios (block -> log ratio) with seeds as the observations (the per-seed means'
    variance plus the within-seed variance averaging took out), and the number of seeds."""
    by_seed: dict[Any, list[float]] = {}
    for block, log in logs.items():
        by_seed.setdefault(seed_of.get(block, block), []).append(log)
    if len(by_seed) < 2:
        return None, len(by_seed)
    means = [statistics.fmean(logs) for logs in by_seed.values()]
    within_df = sum(len(logs) - 1 for logs in by_seed.values())
    within = (sum((x - statistics.fmean(logs)) ** 2 for logs in by_seed.values() for x in logs) / within_df
              if within_df else 0.0)
    averaged_out = statistics.fmean(1 - 1 / len(logs) for logs in by_seed.values())
    return math.sqrt(statistics.variance(means) + within * averaged_out), len(means)


def paired_logs(this: Group, other: Group, figure: RunFigure, blocks: list[Block]) -> dict[Block, float]:
    """block -> log(figure(this) / figure(other)) over `blocks` where both have the figure."""
    top, bottom = this.by_block(figure), other.by_block(figure)
    return {b: math.log(top[b] / bottom[b]) for b in blocks if b in top and b in bottom}


def measured_rows(dirs: list[Path]) -> list[Json]:
    """One row per configuration compared with its baseline: its paired log ratios' sd (blocks observed exactly)."""
    rows = []
    sections, _ = load_runs(dirs)
    for section in sections:
        a = analyse(section)
        for c in a.comparisons:
            exact = c.ratio.uncensored
            if c.other is not c.this.baseline or c.this not in averaging(a.ranking):
                continue
            seed_of = {run.block: run.config.get("seed") for run in c.this.runs}
            if exact.log_sd is None:
                if a.primary.is_time and c.censored:  # too few crossings to measure: recorded as missed
                    rows.append(missed_row(a.primary, section, c, seed_of))
                continue
            log_sd, seeds = (seed_log_sd(c.exact_logs, seed_of) if a.primary.is_time else (exact.log_sd, exact.n))
            if log_sd is None:
                continue
            samples = paired_logs(c.this, c.other, lambda r: r.summary.samples_to_target, c.used)
            rows.append(row_of(a.primary, section, c) | {
                "log_sd": log_sd, "blocks": exact.n, "seeds": seeds, "censored": c.censored,
                "blocks_for_10pct": blocks_for(log_sd, TEN_PERCENT, c.family),
                "samples_log_sd": seed_log_sd(samples, seed_of)[0] if a.primary.is_time else None})
    return rows


def row_of(primary: Primary, section: Section, c: Comparison) -> Json:
    """What a row of comparison c is about: the figure, its target, the data, model and configuration, where."""
    return {"figure": primary.figure, "metric": primary.metric, "value": primary.value,
            "estimator": primary.estimator, "data": section.data, "model": section.model,
            "strategy": c.this.first.strategy, "configuration": c.this.label,
            "cores": c.this.first.summary.machine.cores, "machine": c.this.first.summary.machine.fingerprint,
            "sweeps": sorted({str(r.sweep) for r in c.this.runs if r.sweep})}


def missed_row(primary: Primary, section: Section, c: Comparison, seed_of: dict[Block, Any]) -> Json:
    """The row of a configuration that reached the target in too few blocks to measure its noise (no log-sd)."""
    return row_of(primary, section, c) | {
        "log_sd": None, "blocks": c.ratio.uncensored.n, "seeds": len({seed_of.get(b, b) for b in c.used}),
        "censored": c.censored, "compared": c.blocks,
        "reached": sum(1 for run in c.this.runs if run.block in c.used and time_observation(run).reached),
        "blocks_for_10pct": None, "samples_log_sd": None}


def merged(kept: Json | None, rows: list[Json]) -> Json:
    """The primary_noise entry with these rows, replacing kept rows of the same KEYS (the others stay as they are)."""
    machine = fingerprint()
    new = {tuple(r[k] for k in KEYS) for r in rows}
    kept_rows = [r for r in (kept or {}).get("rows", []) if tuple(r.get(k) for k in KEYS) not in new]
    rows = kept_rows + [r | {"measured_at": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine} for r in rows]
    return {"name": ENTRY, "rows": rows,
            "goal": "the sd of the primary figure's paired log ratios that repeats=auto plans from (no goal)",
            "method": METHOD, "measured_at": max(r["measured_at"] for r in rows),
            "sweeps": [{"path": path, "kept": False, "summary": "rows"}
                       for path in sorted({p for r in rows for p in r.get("sweeps", [])})],
            "machine": machine}  # where it was last recorded; each row names its own machine


def recorded_lines(rows: list[Json], where: str, dirs: list[Path]) -> list[str]:
    lines = [f"recorded in {where} ({ENTRY}): {r['strategy']} {r['figure']} log-sd {r['log_sd']:.3f} over "
             f"{r['seeds']} seeds ({r['blocks']} blocks; x/÷{TEN_PERCENT:.2f} needs {r['blocks_for_10pct']}); "
             f"samples-to-target log-sd {'n/a' if r['samples_log_sd'] is None else format(r['samples_log_sd'], '.3f')}"
             if r["log_sd"] is not None else
             f"recorded in {where} ({ENTRY}): {r['strategy']} {r['figure']}: no noise, it reached the target in "
             f"{r['reached']} of the {r['compared']} blocks compared (repeats=auto will not plan from it)"
             for r in rows]
    return lines or [f"no noise to record under {', '.join(map(str, dirs))}: no comparison with a baseline over 2 "
                     "or more exact blocks"]


def write_sweep_noise(sweep: Path) -> Path | None:
    """Write the sweep's measured rows (measured_rows), each with its runs' machine (else this one's), into its
    SWEEP_NOISE: the candidates the next plan on that machine reads (sweep_noise_files); None: no row."""
    rows = measured_rows([sweep])
    if not rows:
        return None
    now, here = time.strftime("%Y-%m-%d %H:%M:%S"), None
    for row in rows:
        row["measured_at"] = now
        row["machine"] = row.get("machine") or (here := here or fingerprint())
    path = sweep / SWEEP_NOISE
    path.write_text(json.dumps({"name": ENTRY, "method": METHOD, "rows": rows}, indent=1, default=str))
    return path


def sweep_noise_files(sweep: Path) -> list[Path]:
    """The candidate rows of the sweeps beside this one: SWEEP_NOISE of its parent's folders (multirun/NAME), and,
    in Hydra's dated layout (multirun/DATE/TIME) only, of its grandparent's folders' folders."""
    found = [*sweep.parent.glob(f"*/{SWEEP_NOISE}")]
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", sweep.parent.name):
        found += sweep.parent.parent.glob(f"*/*/{SWEEP_NOISE}")
    return sorted({path.resolve() for path in found})


def read_rows(path: Path, entry: bool) -> list[Json]:
    """The rows of an evidence file's primary_noise entry (entry) or of a sweep's SWEEP_NOISE; none if unreadable."""
    try:
        found = json.loads(path.read_text())
        return (next((r for r in found["results"] if r.get("name") == ENTRY), {"rows": []}) if entry else found)["rows"]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def seeds_of(row: Json) -> int:
    """A recorded row's seeds (rows recorded before seeds were counted: its blocks)."""
    return row["seeds"] if "seeds" in row else row["blocks"]


class PlanningNoise(NamedTuple):
    log_sd: float  # pooled over the rows (a prior: PRIOR_INFLATION x the noisiest row's)
    df: int
    where: str  # where it comes from, in words
    rows: list[Json]  # the primary_noise rows it rests on
    basis: str  # OWN_MACHINE (the rows are the machine's planned for), PRIOR, or EVERY_MACHINE (no machine given)

    @property
    def bound(self) -> float:
        """The log-sd a plan is made at: the 95 % upper bound of recorded noise; a prior is its own bound."""
        return self.log_sd if self.basis == PRIOR else upper_log_sd(self.log_sd, self.df)


def planning_noise(path: Path, primary: Primary, data: str, model: str, strategies: list[str],
                   machine: dict | None = None, sweeps: Sequence[Path] = ()) -> PlanningNoise:
    """The log-sd these strategies' primary figure is planned on, its degrees of freedom, where it comes from and its
    rows; ValueError, saying what to run, where none is recorded. Rows: the evidence file's and the sweeps' candidate
    rows (sweep_noise_files). With a machine (its fingerprint): each strategy's newest row measured on it where they
    cover every strategy, else the conservative prior, PRIOR_INFLATION x the noisiest row of any machine; without:
    every machine's rows pooled."""
    rows = read_rows(path, entry=True) + [r for f in sweeps for r in read_rows(f, entry=False)]
    wanted: Json = {"figure": primary.figure, "data": data, "model": model}
    if primary.is_time:
        wanted |= {"metric": primary.metric, "value": primary.value, "estimator": primary.estimator}
    found = [r for r in rows if all(r.get(k) == v for k, v in wanted.items()) and r.get("strategy") in strategies]
    lacking = sorted(set(strategies) - {r["strategy"] for r in found})
    if lacking:
        what = ", ".join(f"{k}={v}" for k, v in wanted.items())
        raise ValueError(
            f"repeats=auto plans the blocks from the primary figure's noise recorded in {path} ({ENTRY}), which has "
            f"none for {', '.join(lacking)} at {what}: measure it with a fixed number of blocks, e.g. "
            f"`{tool_command()} -m strategy={','.join(lacking)} repeats=3 hydra.sweep.dir=multirun/noise` (with the "
            f"same data, model and target), then `python bench/primary_noise.py multirun/noise` (it records into "
            "bench/results/primary_noise.json and conf/evidence.json)")
    basis = EVERY_MACHINE
    if machine is not None:
        here = {r["strategy"]: r for r in sorted((r for r in found if same_machine(r.get("machine") or {}, machine)),
                                                 key=lambda r: str(r.get("measured_at")))}  # the newest last
        basis = OWN_MACHINE if set(here) == set(strategies) else PRIOR
        found = list(here.values()) if basis == OWN_MACHINE else [noisiest(found)]
    missed = [r for r in found if r["log_sd"] is None]
    if missed:
        raise ValueError("; ".join(
            f"{path} ({ENTRY}) records that {r['strategy']} reached {primary.target} in {r['reached']} of the "
            f"{r['compared']} blocks compared ({', '.join(r['sweeps'])}, {r['measured_at']}, "
            f"{describe_machine(r['machine'])})"
            for r in missed) + ": no noise to plan from. Measure it at a target it reaches (target.value, or more "
                                "max_steps) with a fixed number of blocks, and record that")
    inflation = PRIOR_INFLATION if basis == PRIOR else 1.0
    spreads = [(seeds_of(r) - 1, inflation * r["log_sd"]) for r in found]
    pooled = pooled_log_sd(spreads)
    if pooled is None:
        raise ValueError(f"{path} ({ENTRY}) records no degrees of freedom for {', '.join(strategies)}: no noise to "
                         "plan from")
    where = "; ".join(f"{r['strategy']} {r['log_sd']:.3f} ({seeds_of(r)} seeds, {r['measured_at']}, "
                      f"{describe_machine(r['machine'])}{', ' + ', '.join(r['sweeps']) if r.get('sweeps') else ''})"
                      for r in found)
    return PlanningNoise(pooled, sum(df for df, _ in spreads if df > 0), f"{BASIS[basis]}: {where}", found, basis)


def noisiest(rows: list[Json]) -> Json:
    """The row with the largest log-sd; a row that missed the target (no log-sd) is the worst of all."""
    return max(rows, key=lambda r: math.inf if r["log_sd"] is None else r["log_sd"])


def rows_for_machine(rows: list[Json], machine: dict) -> tuple[list[Json], bool]:
    """The verdict simulation's fit: the rows measured on `machine` where they cover every strategy of `rows`, else
    each strategy's noisiest row; and whether they are the machine's own."""
    here = [r for r in rows if same_machine(r["machine"], machine)]
    if {r["strategy"] for r in here} == {r["strategy"] for r in rows}:
        return here, True
    strategies = sorted({r["strategy"] for r in rows})
    return [noisiest([r for r in rows if r["strategy"] == name]) for name in strategies], False


def rows_phrase(own_machine: bool, machine: dict) -> str:
    """What rows_for_machine chose, in words, before the rows' list."""
    if own_machine:
        return "measured on the machine planned for: "
    return (f"not measured on the machine planned for ({describe_machine(machine)}), so each strategy's noisiest "
            "recorded row: ")
