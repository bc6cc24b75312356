"""Does the emulation hold? The headline's paired spread, CPU-quota linearity and dilation invariance, each
measured in interleaved blocks; it sets each strategy's checked dilation."""
import argparse
import random
import statistics
import sys
import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any, TypeVar

from bench.jobs import ROOT, averaging_strategies, named, summary_of
from metrics.report.baselines import load_runs
from metrics.report.stats import Ratio

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
        import subprocess
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
