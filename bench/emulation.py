"""Does the emulation hold? The headline's paired spread, CPU-quota linearity and dilation invariance, each
measured in interleaved blocks; it sets each strategy's checked dilation. Apart (`fidelity`): the fidelity check's
error rates on injected load."""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any, TypeVar

from bench.jobs import ROOT, averaging_strategies, named, summary_of, train
from bench.results import COMMIT, RESULTS
from bench.verdict_simulation import upper_bound
from job.process import core_slot
from metrics.report.baselines import load_runs
from metrics.recording.jsonl import read_jsonl
from metrics.recording.rundir import RunDir
from metrics.report.stats import Ratio
from metrics.summary.isolation import StepLoss, distortion, lost_by_step, step_rows, throttled_share
from metrics.summary.schema import Summary
from metrics.summary.window import steps_in

TOLERANCE = 0.05
FACTORS = (1, 2, 4)
REPEATS = 2  # interleaved blocks of the linearity and invariance checks
LINEARITY_JOB = ["strategy=single", "peers=1", "model=resnet18", "max_steps=20", "eval_every=0",
                 "emulate.allow_unchecked_dilation=true"]
INVARIANCE_JOB = ["peers=2", "model=mlp", "model.width=1024", "network=emulated", "network.bandwidth_mbit=100",
                  "max_steps=20", "eval_every=0", "emulate.isolate=on", "emulate.allow_unchecked_dilation=true"]
HEADLINE = ["strategy=ring,stepwise,ps"]
Arm = TypeVar("Arm", bound=Hashable)


def spread(values: list[float]) -> float | None:
    return (max(values) - min(values)) / statistics.fmean(values) if len(values) > 1 else None


def ratio_figures(values: list[float]) -> dict:
    ratio = Ratio(values)
    interval = ratio.interval()
    return {"per_block": values, "estimate": ratio.estimate, "interval_95": list(interval) if interval else None,
            "spread": spread(values), "worst_deviation": max(abs(v - 1) for v in values)}


def headline(sweep: Path | None) -> dict:
    """Paired speedups of the headline multirun, per strategy (run here when no sweep directory is given)."""
    if sweep is None:
        sweep = ROOT / "multirun" / f"emulation-headline-{time.strftime('%Y%m%d-%H%M%S')}"
        subprocess.run([sys.executable, "train.py", "-m", *HEADLINE, f"hydra.sweep.dir={sweep}", "progress=false",
                        "lock=off"], cwd=ROOT, check=True)
    sections, _ = load_runs([sweep])
    rows: dict[str, dict[str, Any]] = {}
    for group in (g for s in sections for g in s.groups if g.baseline is not g):
        if (speedup := group.speedup) is None or not speedup.n:
            continue
        throughputs = group.values(lambda r: r.summary.throughput_samples_per_s if r.completed else None)
        rows[group.label] = {"blocks": speedup.n, **ratio_figures(speedup.values),
                             "throughput_spread": spread(throughputs), "throughput": throughputs}
    return {"sweep": str(sweep), "strategies": rows,
            "worst_paired_spread": max((r["spread"] or 0 for r in rows.values()), default=None)}


def throughput(*overrides: str) -> float:
    if (found := summary_of(*overrides).throughput_samples_per_s) is None:
        raise RuntimeError(f"{' '.join(overrides)}: no throughput in its summary")
    return found


def interleaved(arms: dict[Arm, list[str]], repeats: int, what: str) -> dict[Arm, list[float]]:
    """arm -> throughput per block; each block runs every arm once, in a shuffled order."""
    found: dict[Arm, list[float]] = {arm: [] for arm in arms}
    for block in range(repeats):
        order = list(arms)
        random.Random(block).shuffle(order)
        for arm in order:
            print(f"emulation: {what} block {block + 1}/{repeats}, {arm}", file=sys.stderr, flush=True)
            found[arm].append(throughput(*arms[arm], f"seed={block}"))
    return found


def linearity(repeats: int) -> dict:
    arms = {"dedicated core": [*LINEARITY_JOB, "emulate.isolate=off"]}
    arms |= {f"quota 1/{k}": [*LINEARITY_JOB, "emulate.isolate=on", f"emulate.dilation={k}"] for k in FACTORS}
    found = interleaved(arms, repeats, "linearity")
    return {"throughput": found,
            "ratios": {arm: ratio_figures([v / ref for v, ref in zip(values, found["dedicated core"])])
                       for arm, values in found.items() if arm != "dedicated core"}}


def checked_factor(ratios: dict[int, dict]) -> int:
    """The largest factor at which this and every smaller factor stayed within TOLERANCE in every block."""
    offered = 1
    for k in sorted(ratios):
        if ratios[k]["worst_deviation"] > TOLERANCE:
            break
        offered = k
    return offered


def linear_factor(linearity: dict) -> int:
    """The largest factor whose quota (1/k core), dilated back, stayed within TOLERANCE of the dedicated core."""
    return checked_factor({k: linearity["ratios"][f"quota 1/{k}"] for k in FACTORS})


def invariance(repeats: int, strategies: dict[str, list[str]]) -> dict:
    """These strategies' invariance; the others keep checked_dilation 1."""
    rows = {}
    for name, overrides in strategies.items():
        arms = {k: [*overrides, *INVARIANCE_JOB, f"emulate.dilation={k}"] for k in FACTORS}
        found = interleaved(arms, repeats, f"invariance {name}")
        ratios = {k: ratio_figures([v / ref for v, ref in zip(found[k], found[1])]) for k in FACTORS if k != 1}
        rows[name] = {"throughput": found, "ratios": ratios, "checked_dilation": checked_factor(ratios)}
    return rows


def report(result: dict) -> None:
    for label, row in result["headline"]["strategies"].items():
        print(f"headline {label:<34} paired speedup spread {row['spread']:.1%} over {row['blocks']} blocks, "
              f"throughput spread {row['throughput_spread']:.1%}")
    for arm, ratio in result["linearity"]["ratios"].items():
        print(f"linearity {arm:<12} dilated back / dedicated core {ratio['estimate']:.3f} "
              f"(blocks {', '.join(f'{v:.3f}' for v in ratio['per_block'])})")
    for name, row in result["invariance"].items():
        print(f"invariance {name:<10} " + ", ".join(
            f"k={k}: {r['estimate']:.3f} ({', '.join(f'{v:.3f}' for v in r['per_block'])})"
            for k, r in row["ratios"].items()) + f" -> checked up to {row['checked_dilation']}")


def add_arguments(parser: argparse._ActionsContainer) -> None:
    parser.add_argument("--emulation-repeats", type=int, metavar="N",
                        help=f"interleaved blocks of the linearity and invariance checks (default {REPEATS})")
    parser.add_argument("--emulation-strategies", metavar="NAMES",
                        help="the invariance check's strategies, a comma list (default: every averaging strategy)")
    parser.add_argument("--emulation-headline-sweep", type=Path, metavar="DIR",
                        help="a finished headline sweep to read (default: run it here)")
    parser.add_argument("--emulation-fidelity-blocks", type=int, metavar="N",
                        help=f"emulation_fidelity's blocks (default {FIDELITY_BLOCKS}: the declared sample)")


def run(repeats: int = REPEATS, strategies: str = "", headline_sweep: Path | None = None) -> dict:
    started = time.monotonic()
    chosen = named(averaging_strategies("emulation"), strategies, "--emulation-strategies", "strategy")  # checked first
    result = {"headline": headline(headline_sweep), "linearity": linearity(repeats),
              "invariance": invariance(repeats, chosen)}
    report(result)
    return {
        "name": "emulation",
        "ratio": result["headline"]["worst_paired_spread"],
        "goal": f"<= {TOLERANCE} (paired speedup spread); dilation offered where within +-{TOLERANCE:.0%}",
        "setup": f"headline: {' '.join(HEADLINE)} (its default shape and repeats); linearity: "
                 f"{' '.join(LINEARITY_JOB)}; invariance: {' '.join(INVARIANCE_JOB)} with "
                 f"{averaging_strategies('emulation')}, factors {list(FACTORS)}; {repeats} interleaved blocks each; "
                 f"ratio = the worst strategy's spread of paired speedups in the headline multirun",
        **result,
        "sweeps": [{"path": result["headline"]["sweep"], "kept": False, "summary": "headline"}],
        "linearity_holds_up_to": linear_factor(result["linearity"]),
        "checked_dilation": {name: min(row["checked_dilation"], linear_factor(result["linearity"]))
                             for name, row in result["invariance"].items()},
        "duration_s": time.monotonic() - started,
    }


# The fidelity check's error rates on injected load (metrics/summary/isolation.py distortion), declared before they
# are measured: python bench/run.py emulation_fidelity [--emulation_fidelity-blocks N]
FIDELITY_JOB = ["strategy=allreduce", "peers=2", "model=resnet18", "network=emulated", "network.bandwidth_mbit=400",
                "max_steps=45", "measure_window.after_step=5", "measure_window.steps=40", "eval_every=0",
                "speed_reference.repetitions=0"]
SEGMENT_S = 7.0  # the load's on and off segments: ~3.5 steps of ~2 s; the window's 40 steps (70-90 s) hold 4 of each
LOADS = ("spin", "torch")  # a Python busy loop; a co-located torch job (1 thread of 128 x 128 matrix products)
DUTIES = (0.02, 0.1, 0.2)  # the wall share of each 10 ms period a load runs while on, pinned to rank 0's core
FIDELITY_BLOCKS = 5  # the declared sample: 5 blocks of 6 toggled runs (30 judged), each its own truth
MOVED, STILL = 0.10, 0.02  # a run whose step moved by MOVED or more must be flagged, by STILL or less must pass
THRESHOLDS = (0.02, 0.03, 0.04, 0.05, 0.06, 0.08, 0.10)  # candidate limits: the largest with no false pass is chosen
LOAD_SCRIPT = """import os, time
os.sched_setaffinity(0, {{{core}}})
if "{kind}" == "torch":
    import torch
    torch.set_num_threads(1)
    a = torch.randn(128, 128)
    work = lambda: a @ a
else:
    work = lambda: None
print(repr(start := time.time()), flush=True)
while True:
    period = time.perf_counter()
    if (int((time.time() - start) // {segment_s}) % 2 == 0) == {starts_on}:  # on: as load_states reads it
        while time.perf_counter() - period < {duty} * 0.01:
            work()
    time.sleep(max(0.0, 0.01 - (time.perf_counter() - period)))
"""


def fidelity_plan(blocks: int) -> list[list[tuple[str, float, bool]]]:
    """Per block, its (load, duty, starts_on) runs: every load once, shuffled, its load on or off first as drawn."""
    plan = []
    for block in range(blocks):
        draw = random.Random(block)
        loads = [(load, duty) for load in LOADS for duty in DUTIES]
        draw.shuffle(loads)
        plan.append([(load, duty, draw.random() < 0.5) for load, duty in loads])
    return plan


def load_states(steps_by_rank: dict[int, list[dict]], lost: dict[int, dict[int, StepLoss]], start: float,
                starts_on: bool) -> dict[int, bool | None]:
    """step -> whether the load (switching every SEGMENT_S from `start`, on first where starts_on) was on or off over
    all of it on every rank (its span in `lost` up to its ended_at); None where it crossed a switch."""
    segments: dict[int, set[float]] = {}
    for rank, steps in steps_by_rank.items():
        for s in (s for s in steps if s["step"] in lost[rank]):
            ended, span = s["ended_at"], lost[rank][s["step"]][1]
            segments.setdefault(s["step"], set()).update((t - start) // SEGMENT_S for t in (ended - span, ended))
    return {step: (min(found) % 2 == 0) == starts_on if len(found) == 1 and min(found) >= 0 else None
            for step, found in segments.items()}


def toggled_figures(steps_by_rank: dict[int, list[dict]], throttled: dict[int, float], start: float,
                    starts_on: bool) -> dict:
    """The window's steps classed by load_states. moved (the truth): the loaded steps' mean span over the unloaded
    steps', less 1 (a step's span: its ranks' mean); distortion over the loaded steps, background over the unloaded."""
    lost = {rank: lost_by_step(steps, throttled.get(rank, 0.0)) for rank, steps in steps_by_rank.items()}
    states = load_states(steps_by_rank, lost, start, starts_on)
    by_state = {state: {rank: {step: loss for step, loss in by_step.items() if states[step] is state}
                        for rank, by_step in lost.items()} for state in (True, False)}
    spans = {state: [statistics.fmean(span for _, span, *_ in row) for row in step_rows(found).values()]
             for state, found in by_state.items()}
    if not spans[True] or not spans[False]:
        raise RuntimeError(f"the window held {len(spans[True])} loaded and {len(spans[False])} unloaded steps")
    return {"loaded_steps": len(spans[True]), "unloaded_steps": len(spans[False]),
            "crossing_steps": sum(state is None for state in states.values()),
            "loaded_step_s": statistics.fmean(spans[True]), "unloaded_step_s": statistics.fmean(spans[False]),
            "moved": statistics.fmean(spans[True]) / statistics.fmean(spans[False]) - 1,
            "distortion": distortion(by_state[True]), "background": distortion(by_state[False])}


def error_rates(moved_rows: list[dict]) -> dict[str, dict]:
    """Per candidate limit: false passes (moved >= MOVED, distortion not above the limit) of the runs that moved,
    false flags (moved <= STILL, distortion above it) of those that did not, each with its one-sided 95 %
    Clopper-Pearson upper bound. A run without a distortion was not flagged."""
    moved = [r for r in moved_rows if r["moved"] >= MOVED]
    still = [r for r in moved_rows if r["moved"] <= STILL]

    def rate(events: int, runs: int) -> dict:
        return {"events": events, "runs": runs, "rate": events / runs if runs else None,
                "upper_95": upper_bound(events, runs) if runs else None}

    def flagged(row: dict, limit: float) -> bool:
        return row["distortion"] is not None and row["distortion"] > limit

    return {f"{limit:g}": {"false_pass": rate(sum(not flagged(r, limit) for r in moved), len(moved)),
                           "false_flag": rate(sum(flagged(r, limit) for r in still), len(still))}
            for limit in THRESHOLDS}


def chosen_limit(rates: dict[str, dict]) -> float:
    """The declared rule: the largest candidate with no false pass (none: the smallest)."""
    clean = [float(limit) for limit, r in rates.items() if r["false_pass"]["events"] == 0]
    return max(clean) if clean else min(float(limit) for limit in rates)


def toggled_run(load: str, duty: float, starts_on: bool, block: int) -> dict:
    """One run of FIDELITY_JOB beside `load` toggled on rank 0's core: toggled_figures of its window's steps."""
    script = LOAD_SCRIPT.format(core=core_slot(0, 1, os.sched_getaffinity(0))[0], kind=load, duty=duty,
                                segment_s=SEGMENT_S, starts_on=starts_on)
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        if process.stdout is None or not (line := process.stdout.readline()):
            raise RuntimeError(f"the {load} load did not start")
        with train(*FIDELITY_JOB, f"seed={block}") as run_dir:
            run = RunDir(run_dir)
            summary = Summary.load(run.summary)
            window = (summary.window.first or 0, summary.window.last or 0)  # none: no step, refused below
            steps = {p.rank: steps_in(read_jsonl(p.steps), window)[0]
                     for p in run.peers() if p.steps.exists()}
    finally:
        process.kill()
        process.wait()
    throttled = {row["rank"]: throttled_share(row) for row in summary.isolation.by_rank}
    return {"block": block, "load": load, "duty": duty, "starts_on": starts_on, "commit": (COMMIT or {}).get("sha"),
            **toggled_figures(steps, throttled, float(line), starts_on)}


def fidelity(blocks: int = FIDELITY_BLOCKS) -> dict:
    """Every planned run (kept in bench/results/emulation_fidelity_toggled.jsonl as it ends; a rerun goes on from
    there), then the rates and the limit."""
    log = RESULTS / "emulation_fidelity_toggled.jsonl"
    rows = read_jsonl(log) if log.exists() else []
    runs = [(block, *run) for block, order in enumerate(fidelity_plan(blocks)) for run in order]
    if [(r["block"], r["load"], r["duty"], r.get("starts_on")) for r in rows] != runs[:len(rows)]:
        raise SystemExit(f"{log} holds runs of another plan: move it away to measure this one")
    for block, load, duty, starts_on in runs[len(rows):]:
        print(f"fidelity: block {block + 1}/{blocks}, {load} {duty:g}", file=sys.stderr, flush=True)
        rows.append(toggled_run(load, duty, starts_on, block))
        with log.open("a") as f:
            f.write(json.dumps(rows[-1]) + "\n")
    rates = error_rates(rows)
    limit = chosen_limit(rates)
    return {"name": "emulation_fidelity",
            "goal": f"every run moved by >= {MOVED:.0%} flagged and every run moved by <= {STILL:.0%} passed, at the "
                    "chosen limit",
            "goal_met": rates[f"{limit:g}"]["false_pass"]["events"] == 0
            and rates[f"{limit:g}"]["false_flag"]["events"] == 0,
            "setup": f"{' '.join(FIDELITY_JOB)}; loads {list(LOADS)} at duties {list(DUTIES)} on rank 0's core, "
                     f"toggled on and off every {SEGMENT_S:g} s (the first segment drawn per run); {blocks} blocks of "
                     "every load once, shuffled; true move: the loaded steps' mean over the unloaded steps', less 1 "
                     "(steps crossing a switch left out); figure: the distortion of the loaded steps",
            "rule": f"moved >= {MOVED:.0%}: must be flagged; <= {STILL:.0%}: must pass; the limit is the largest "
                    f"of {list(THRESHOLDS)} with no false pass",
            "ratio": None, "runs": rows, "rates": rates, "chosen_limit": limit}
