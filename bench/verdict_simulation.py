"""The verdict's error rates by simulation: sweeps drawn from the recorded noise, miss and crash rates,
judged by the report's own analysis (false claims, contradictions, coverage, power)."""
import argparse
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import beta, norm

from bench.jobs import choices
from bench.results import RESULTS, load
from bench.run_folders import BlockRun, write_sweep
from metrics.report.baselines import conf_file, load_runs
from metrics.report.noise import rows_for_machine, rows_phrase
from metrics.report.runs import CONF_DIR
from metrics.report.stats import FASTER, SLOWER
from metrics.report.verdict import analyse, unsteady
from metrics.summary.schema import Json

CONFIGURATIONS = ("ps", "ring", "stepwise")
EFFECTS = (1.1, 1.25, 1.5, 2.0)
SCENARIOS = {"global null": {"ps": 1.0, "ring": 1.0, "stepwise": 1.0},
             "partial null ring x2": {"ps": 1.0, "ring": 2.0, "stepwise": 1.0},
             **{f"effect x{e:g}": {"ps": 1 / e, "ring": e, "stepwise": 1.0} for e in EFFECTS}}
BLOCKS = (3, 6, 10)
ONE_BUDGET = "one budget"  # log-normal, every arm's horizon the baseline's: a slower arm misses more
NOISES = ("log-normal", "log-t3", ONE_BUDGET)
DRAWS = 200  # per cell (54 cells): enough for a 95 % upper bound near 1.5 % where no draw errs; a few CPU minutes
BASE_S = 100.0  # the baseline's median time-to-target (s); ratios are free of it
BLOCK_LOG_SD = 0.1  # assumed
ONE_PEER_SPEED = 0.6  # the single 1x1 reference against the baseline (not compared; there as in the headline)
SAMPLES = 4000  # bench/run_folders.py: a run trains 4000 samples, so throughput = SAMPLES / its horizon
CONFIDENCE = 0.95
TMPFS = Path("/dev/shm")
FALSE_CLAIM_UPPER_GOAL = 0.06  # every cell's family-wise false-claim rate, its 95 % upper bound at most this
COVERAGE_GOAL = 0.93  # every cell's intervals hold the true ratio at least this often
GOAL = (f"every cell (each scenario, number of blocks and noise): the family-wise false-claim rate's 95 % upper bound "
        f"<= {FALSE_CLAIM_UPPER_GOAL:.0%}, 0 contradictions, coverage >= {COVERAGE_GOAL:.0%}")


def jeffreys(events: int, trials: int) -> float:
    return (events + 0.5) / (trials + 1)


def fitted(results: dict, estimator: str | None = None) -> dict:
    """The run-level log sd, miss rate and crash rate, from the recorded runs of bench/results (its method): the
    headline's rows at its estimator (default: conf/config.yaml's), from the machine of its latest sweep where they
    cover every configuration (else each one's noisiest row)."""
    estimator = estimator or conf_file(CONF_DIR / "config.yaml")["target"]["estimator"]
    answers = results["headline"]["answers"]
    rows = [r for r in results["primary_noise"]["rows"] if r["strategy"] in CONFIGURATIONS
            and r["figure"] == "time_to_target" and r.get("estimator") == estimator and r["log_sd"] is not None]
    rows, own_machine = rows_for_machine(rows, answers[-1]["machine"])
    df = sum(r["blocks"] - 1 for r in rows)
    paired_sd = math.sqrt(sum((r["blocks"] - 1) * r["log_sd"] ** 2 for r in rows) / df)
    compared_runs = sum(2 * (r["blocks"] + r["censored"]) for r in rows)
    misses = sum(r["censored"] for r in rows)
    runs = sum(a["runs"] for a in answers)
    crashes = sum(c["censored"] for a in answers for c in a["comparisons"] if c["against_baseline"])
    miss_rate = jeffreys(misses, compared_runs)
    return {"paired_log_sd": paired_sd, "paired_df": df, "run_log_sd": paired_sd / math.sqrt(2),
            "miss_rate": miss_rate, "misses": misses, "compared_runs": compared_runs,
            "horizon_z": float(norm.ppf(1 - miss_rate)),
            "crash_rate": jeffreys(crashes, runs), "crashes": crashes, "runs": runs,
            "sources": ["primary_noise", "headline"], "estimator": estimator,
            "rows": rows_phrase(own_machine, answers[-1]["machine"])
            + "; ".join(f"{r['strategy']} {r['log_sd']:.3f} ({r['blocks']} blocks, {r['measured_at']})" for r in rows)}


def noise(rng: np.random.Generator, kind: str, log_sd: float) -> float:
    if kind == "log-t3":
        return log_sd * rng.standard_t(3) / math.sqrt(3)
    return log_sd * rng.standard_normal()


def sweep_jobs(rng: np.random.Generator, speeds: dict[str, float], blocks: int, kind: str,
               fit: dict[str, Any]) -> dict[str, list[BlockRun]]:
    """write_sweep's jobs for one simulated sweep: every job's run in every block."""
    jobs: dict[str, tuple[str, int, Json, float]] = {f"strategy={name}": (name, 2, {}, speed)
                                                     for name, speed in speeds.items()}
    jobs |= {"baseline_2x1": ("single", 2, {}, 1.0),
             "baseline_2x1_control": ("single", 2, {"config": {"arm": "control"}}, 1.0),
             "baseline_1x1": ("single", 1, {}, ONE_PEER_SPEED)}
    found: dict[str, list[BlockRun]] = {name: [] for name in jobs}
    for _ in range(blocks):
        block_effect = BLOCK_LOG_SD * rng.standard_normal()
        for name, (strategy, peers, extra, speed) in jobs.items():
            median = BASE_S / speed * math.exp(block_effect)
            budget = median * speed if kind == ONE_BUDGET else median
            horizon = budget * math.exp(fit["horizon_z"] * fit["run_log_sd"])
            took = median * math.exp(noise(rng, kind, fit["run_log_sd"]))
            crashed = rng.random() < fit["crash_rate"]
            run = dict(extra, status="failed") if crashed else extra
            found[name].append((strategy, peers, 1, SAMPLES / horizon, None if crashed or took > horizon else took,
                                run))
    return found


def judged(folder: Path, speeds: dict) -> dict:
    """The report's analysis of one sweep folder: per declared comparison its truth and what the report says."""
    sections, _ = load_runs([folder])
    analysis = analyse(sections[0])
    withheld = bool(analysis.refusals or unsteady(analysis.controls))
    speed = {"single": 1.0, **speeds}
    comparisons = [{"true": speed[c.this.first.strategy] / speed[c.other.first.strategy], "decision": c.decision,
                    "estimate": c.ratio.estimate, "interval": c.ratio.interval(), "blocks": c.blocks,
                    "censored": c.censored} for c in analysis.comparisons]
    return {"withheld": withheld, "comparisons": comparisons}


def wrong(c: dict, decision: str) -> bool:
    """A claim that is false: any claim on a true ratio of 1, or a claim against the true direction."""
    if decision not in (FASTER, SLOWER):
        return False
    return math.isclose(c["true"], 1.0) or (decision == FASTER) != (c["true"] > 1)


def contradicts(c: dict) -> bool:
    """A claim whose direction contradicts its printed ratio."""
    estimate = c["estimate"]
    return estimate is not None and ((c["decision"] == FASTER and estimate < 1)
                                     or (c["decision"] == SLOWER and estimate > 1))


def upper_bound(events: int, trials: int) -> float:
    """The one-sided 95 % Clopper-Pearson upper bound of a binomial rate."""
    return 1.0 if events == trials else float(beta.ppf(CONFIDENCE, events + 1, trials - events))


def effect_key(true: float) -> str:
    """A true ratio as power is keyed: its size, whichever the direction (x2 and x1/2 alike)."""
    return f"x{max(true, 1 / true):.4g}"


def cell_figures(draws: list[dict]) -> dict:
    """The records of one cell (its method) from its draws' judgements."""
    n = len(draws)
    answered = sum(any(wrong(c, "" if d["withheld"] else c["decision"]) for c in d["comparisons"]) for d in draws)
    decided = sum(any(wrong(c, c["decision"]) for c in d["comparisons"]) for d in draws)
    every = [c for d in draws for c in d["comparisons"]]
    claims = [c for c in every if c["decision"] in (FASTER, SLOWER)]
    with_interval = [c for c in every if c["interval"] is not None]
    covered = sum(c["interval"][0] <= c["true"] <= c["interval"][1] for c in with_interval)
    power: dict[str, list[bool]] = {}
    for d in draws:
        for c in d["comparisons"]:
            if math.isclose(c["true"], 1.0):
                continue
            hit = not d["withheld"] and c["decision"] == (FASTER if c["true"] > 1 else SLOWER)
            power.setdefault(effect_key(c["true"]), []).append(hit)
    return {"draws": n, "false_claim_draws": answered,
            "false_claim_rate": answered / n, "false_claim_upper": upper_bound(answered, n),
            "false_decision_rate": decided / n, "false_decision_upper": upper_bound(decided, n),
            "withheld_share": sum(d["withheld"] for d in draws) / n,
            "contradictions": sum(map(contradicts, claims)), "claims": len(claims),
            "coverage": covered / len(with_interval) if with_interval else None,
            "no_interval_share": 1 - len(with_interval) / len(every),
            "power": {key: sum(hits) / len(hits) for key, hits in sorted(power.items())},
            "blocks_used": statistics.fmean(c["blocks"] for c in every),
            "censored_blocks": statistics.fmean(c["censored"] for c in every)}


def missed_goals(cells: list[dict]) -> list[str]:
    """Each cell that misses a goal (GOAL), and which figure missed it."""
    found = []
    for c in cells:
        name = f"{c['scenario']}, {c['blocks']} blocks, {c['noise']}"
        if c["false_claim_upper"] > FALSE_CLAIM_UPPER_GOAL:
            found.append(f"{name}: false claims up to {c['false_claim_upper']:.1%}")
        if c["contradictions"]:
            found.append(f"{name}: {c['contradictions']} contradictions")
        if c["coverage"] is not None and c["coverage"] < COVERAGE_GOAL:
            found.append(f"{name}: coverage {c['coverage']:.1%}")
    return found


def simulate(speeds: dict, blocks: int, kind: str, draws: int, fit: dict, seed: int, scratch: Path) -> dict:
    """One cell: `draws` simulated sweeps, each written, judged and removed."""
    rng = np.random.default_rng(seed)
    found = []
    for draw in range(draws):
        folder = scratch / f"draw{draw}"
        write_sweep(folder, sweep_jobs(rng, speeds, blocks, kind, fit))
        found.append(judged(folder, speeds))
        shutil.rmtree(folder)
    return cell_figures(found)


def add_arguments(parser: argparse._ActionsContainer) -> None:
    parser.add_argument("--verdict_simulation-draws", type=int, metavar="N",
                        help=f"simulated sweeps per cell (default {DRAWS})")
    parser.add_argument("--verdict_simulation-scenarios", metavar="A,B",
                        help="scenarios to run, comma-separated (default: all: " + ", ".join(SCENARIOS) + ")")
    parser.add_argument("--verdict_simulation-blocks", metavar="3,6",
                        help=f"block counts (default {','.join(map(str, BLOCKS))})")


def run(draws: int = DRAWS, scenarios: str | None = None, blocks: str | None = None,
        results: Path = RESULTS, seed: int = 0) -> dict:
    if draws < 1:
        raise SystemExit(f"verdict_simulation: draws must be at least 1, got {draws}")
    chosen = choices(scenarios, SCENARIOS, str, "--verdict_simulation-scenarios", error=SystemExit)
    block_counts = choices(blocks, BLOCKS, int, "--verdict_simulation-blocks", error=SystemExit)
    fit = fitted({name: entry.body for name in ("primary_noise", "headline") if (entry := load(name, results))})
    started = time.monotonic()
    cells = []
    scratch = Path(tempfile.mkdtemp(prefix="verdict-simulation-", dir=TMPFS if TMPFS.is_dir() else None))
    try:
        for index, (scenario, count, kind) in enumerate((s, b, k) for s in chosen for b in block_counts
                                                       for k in NOISES):
            print(f"verdict_simulation: {scenario}, {count} blocks, {kind}", file=sys.stderr, flush=True)
            cpu_started = time.process_time()
            figures = simulate(SCENARIOS[scenario], count, kind, draws, fit, seed + index, scratch)
            cells.append({"scenario": scenario, "blocks": count, "noise": kind} | figures
                         | {"cpu_s": time.process_time() - cpu_started})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    duration, cpu_s = time.monotonic() - started, sum(c["cpu_s"] for c in cells)
    false_draws = sum(c["false_claim_draws"] for c in cells)
    return {
        "name": "verdict_simulation",
        "ratio": false_draws / (draws * len(cells)),
        "goal": GOAL,
        "goal_met": not missed_goals(cells),
        "setup": f"{draws} simulated headline sweeps per cell ({len(cells)} cells: scenario x blocks x noise), "
                 "through load_runs + analyse; ratio = the family-wise false-claim rate pooled over cells (draws)",
        "fit": fit,
        "draws": draws,
        "cells": cells,
        "false_claim_upper": upper_bound(false_draws, draws * len(cells)),
        "contradictions": sum(c["contradictions"] for c in cells),
        "duration_s": duration,
        "cpu_s": cpu_s,
        "draws_per_cpu_s": draws * len(cells) / cpu_s,
    }
