"""The thesis's question: with 16 vCPUs, does hivemind with 2, 4, 8 or 16 peers (8, 4, 2, 1 vCPUs each) beat
one 16-vCPU process, and where does the time go as target batch size, local updates and batch size change?

    python bench/run.py thesis      # >= 16 cores: the full grid; fewer: the slice this machine runs faithfully
    AVGBENCH_THESIS_FAMILIES=hivemind python bench/run.py thesis    # only these families (comma list; default all)

Every family below is one `train.py -m` multirun in paired blocks (launchers/sweeper.py): each block runs every
configuration and its equal-resource baseline (one process with all the CPUs) in a shuffled order, so speedups
and time-to-target ratios are paired per block, with 95 % t-intervals and Holm-corrected claims
(metrics/stats.py); each family's report.html sits in its sweep directory. ResNet18 on the embedded digits,
batch 32, lr 0.01; run lengths are shortened (max_steps = AVGBENCH_THESIS_STEPS per peer), target batch sizes
never (a scaled-down target batch would average every step and invert the compute-to-averaging ratio studied).
AVGBENCH_THESIS_FAMILIES names the families to run (an unknown name fails before any run); AVGBENCH_THESIS_DIR
(default multirun/thesis-DATE) holds one sweep per family: run again with the same directory, a family's
completed runs are kept (the sweeper resumes), and bench/run.py keeps the saved families it did not rerun (merge).

Full grid (>= 16 cores), AVGBENCH_THESIS_REPEATS blocks (default 3):
  hivemind    peers 2, 4, 8, 16 at 16/N vCPUs x local updates on/off x target batch 10000 ... 625
              (experiment=thesis_hivemind scale=1: 40 configurations + the 1 x 16 baseline)
  batch       hivemind 8 x 2, target batch 2500, local updates on/off x batch size 32, 64, 128 (6 + 3 baselines)
  strategies  every other averaging strategy of the registry at 8 x 2 (+ the 1 x 16 baseline)
  Cost: about 170 runs of STEPS steps; at 300 steps, with a 2-vCPU ResNet18 step of about 0.4 s, 8-9 hours (an
  estimate from this machine's step time, not a measurement of a 16-core machine).
Slice (fewer than 16 cores: this machine has 2), the same families at total_cpus = the usable cores, 100 steps:
  hivemind    2 x 1, local updates on/off, target batch 625 (the thesis's smallest: epochs fall inside a short run)
  strategies  every other averaging strategy at 2 x 1 (ps: 2 workers + its server, oversubscribed, as it says)
  each family with its baselines: one process on 2 cores (batch 64) and one on 1 core (batch 32). Per block:
  hivemind 2 + 2 runs, strategies one run per other strategy + 2.

What the slice cannot say (peers with several vCPUs, thread scaling, 4-16 peers on their own cores) is listed in
the README's "Reproducing the thesis"; no row is projected here.

Per configuration (each family's groups, metrics/report_data.py): speedup over the baseline (throughput ratio per
block: estimate, 95 % interval, decision), time-to-target ratio, samples-to-target and time per sample (means
over blocks), the time breakdown shares and bottleneck, and for hivemind the group-size distribution per round
(summary.json averaging_rounds, summed over blocks) and failed rounds.
"""
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.jobs import ROOT, averaging_strategies
from metrics.report_data import load_runs
from metrics.stats import ALPHA, decide, holm

FULL_CORES = 16
STEPS = int(os.environ.get("AVGBENCH_THESIS_STEPS", 300))
REPEATS = int(os.environ.get("AVGBENCH_THESIS_REPEATS", 3))
JOB = ["model=resnet18", "data=digits", "batch_size=32", "lr=0.01", "progress=false", "lock=off"]
OTHERS = ",".join(averaging_strategies(skip={"hivemind": "its own families"}))


def families(cores: int) -> dict[str, list[str]]:
    """Family -> its multirun's overrides: the full grid on >= 16 cores, else the slice at these cores."""
    if cores >= FULL_CORES:
        return {
            "hivemind": ["experiment=thesis_hivemind", "scale=1", f"total_cpus={FULL_CORES}", f"max_steps={STEPS}"],
            "batch": ["experiment=thesis_hivemind", "scale=1", f"total_cpus={FULL_CORES}", "peers=8",
                      "target_batch_base=2500", "batch_size=32,64,128", f"max_steps={STEPS}"],
            "strategies": [f"strategy={OTHERS}", "peers=8", "peer_cpus=2", f"max_steps={STEPS}"],
        }
    return {
        "hivemind": ["experiment=thesis_hivemind", "scale=1", f"total_cpus={cores}", "peers=2",
                     "target_batch_base=625", "max_steps=100"],
        "strategies": [f"strategy={OTHERS}", "peers=2", "peer_cpus=1", "max_steps=100"],
    }


def chosen(plan: dict[str, list[str]], text: str | None = None) -> dict[str, list[str]]:
    """The plan's families that AVGBENCH_THESIS_FAMILIES (or `text`) names, a comma list; unset or empty: all."""
    given = text if text is not None else os.environ.get("AVGBENCH_THESIS_FAMILIES", "")
    names = [n.strip() for n in given.split(",") if n.strip()]
    unknown = [n for n in names if n not in plan]
    if unknown:
        raise ValueError(f"AVGBENCH_THESIS_FAMILIES: unknown family {', '.join(unknown)} (here: {', '.join(plan)})")
    return {name: overrides for name, overrides in plan.items() if not names or name in names}


def family_overrides(overrides: list[str]) -> list[str]:
    """A family's train.py overrides after the job's: Hydra keeps the last value of a key, so the family's sweeps
    (batch_size=32,64,128) win over JOB's."""
    return [*JOB, *overrides]


def multirun(name: str, overrides: list[str], out: Path) -> Path:
    sweep = out / name
    command = [sys.executable, "train.py", "-m", *family_overrides(overrides), f"repeats={REPEATS}",
               f"hydra.sweep.dir={sweep}"]
    print(f"thesis: {name}: {' '.join(command[2:])}", file=sys.stderr, flush=True)
    subprocess.run(command, cwd=ROOT, check=False)  # failed runs are findings: the report says which
    return sweep


def group_sizes(runs) -> dict:
    """kind -> group size -> rounds, over the runs' averaging_rounds (each round once)."""
    found: dict = {}
    for run in runs:
        for kind, sizes in ((run.summary.get("averaging_rounds") or {}).get("group_sizes") or {}).items():
            for size, count in sizes.items():
                found.setdefault(kind, {})[size] = found.setdefault(kind, {}).get(size, 0) + count
    return found


def mean_of(runs, key: str):
    values = [r.summary.get(key) for r in runs if r.completed and r.summary.get(key) is not None]
    return statistics.fmean(values) if values else None


def rows_of(sweep: Path) -> list[dict]:
    sections, _ = load_runs([sweep])
    groups = [g for s in sections for g in s.groups if g.baseline]
    adjusted = holm([g.speedup.p_value() if g.speedup else None for g in groups])
    rows = []
    for group, p in zip(groups, adjusted):
        runs = group.runs
        shares = [r.summary.get("time_breakdown_share") or {} for r in runs if r.completed]
        mean_shares = {k: statistics.fmean(s.get(k, 0.0) for s in shares) for k in (shares[0] if shares else {})}
        interval = group.speedup.interval() if group.speedup else None
        rows.append({
            "configuration": group.label, "projected": False, "peers": group.first.config["peers"],
            "peer_cpus": group.first.config["peer_cpus"], "runs": len(runs),
            "completed": sum(r.completed for r in runs),
            "speedup": group.speedup.estimate if group.speedup and group.speedup.n else None,
            "speedup_interval_95": list(interval) if interval else None,
            "speedup_claim": decide(group.speedup, p, 0.05) if group.speedup else None,
            "time_to_target_ratio": group.ttt_speedup.estimate if group.ttt_speedup and group.ttt_speedup.n else None,
            "samples_to_target": mean_of(runs, "samples_to_target"),
            "time_per_sample_s": mean_of(runs, "time_per_sample_s"),
            "time_breakdown_share": mean_shares,
            "bottleneck": max(mean_shares, key=mean_shares.get) if mean_shares else None,
            "averaging_group_sizes": group_sizes(runs) or None,
            "averaging_rounds_failed": sum((r.summary.get("averaging_rounds") or {}).get("failed", 0) for r in runs),
        })
    return rows


def merge(kept: dict, new: dict) -> dict:
    """The saved entry and a new run's: the new run's families replace the saved ones of the same name, the
    others stay (each with its measured_at)."""
    def dated(entry: dict) -> dict:
        return {name: {"measured_at": entry.get("measured_at")} | family
                for name, family in (entry.get("families") or {}).items()}

    families_now = dated(kept) | dated(new)
    speedups = [r["speedup"] for f in families_now.values() for r in f["rows"] if r.get("speedup")]
    return new | {"families": families_now, "ratio": max(speedups, default=0.0)}


def run() -> dict:
    started = time.monotonic()
    cores = len(os.sched_getaffinity(0))
    out = Path(os.environ.get("AVGBENCH_THESIS_DIR", ROOT / "multirun" / f"thesis-{time.strftime('%Y%m%d-%H%M%S')}"))
    full = cores >= FULL_CORES
    plan = chosen(families(cores))
    results = {name: rows_of(multirun(name, overrides, out)) for name, overrides in plan.items()}
    speedups = [r["speedup"] for rows in results.values() for r in rows if r["speedup"]]
    return {
        "name": "thesis",
        "ratio": max(speedups, default=0.0),
        "goal": "report: speedup over one process with all the CPUs, with 95 % intervals (no goal)",
        "scope": "full grid" if full else f"slice on {cores} cores (README: Reproducing the thesis)",
        "families": {name: {"overrides": plan[name], "rows": rows} for name, rows in results.items()},
        "sweeps": str(out),
        "setup": f"{cores} cores, {REPEATS} paired blocks, {' '.join(JOB)}, families {', '.join(plan)}; ratio = the "
                 f"best measured speedup's estimate",
        "claims_alpha": ALPHA,
        "duration_s": time.monotonic() - started,
        "method": __doc__.strip(),
    }
