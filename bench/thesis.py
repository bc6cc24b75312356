"""The thesis's question: does hivemind with 2-16 peers on 16 vCPUs beat one 16-vCPU process, and where does
the time go? Paired multirun families; on fewer cores, a slice and the projected remainder."""
import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.jobs import ROOT, named
from metrics.projection.evidence import Evidence, load_evidence, unvalidated
from metrics.projection.link import Link, parse_link, payload_share
from metrics.projection.project import Measured, measure, project_link
from metrics.report.baselines import load_runs
from metrics.report.compare import Comparison, family
from metrics.report.primary import THROUGHPUT, TIME_TO_TARGET, Primary, declare
from metrics.report.runs import Run, find_runs
from metrics.report.tables import reached_count
from metrics.report.verdict import analyse
from metrics.report.stats import ALPHA
from metrics.summary.schema import Summary

FULL_CORES = 16
STEPS = 300  # max_steps of a full-grid run (--thesis-steps)
REPEATS = 3  # paired blocks (--thesis-repeats)
DEFAULT_LINK = "lan"  # the projected remainder's link (--thesis-link): a conf/network preset or MBIT[,MS[,MTU]]
JOB = ["model=resnet18", "data=digits", "batch_size=32", "lr=0.01", "progress=false", "lock=off"]
COMPARED = "allreduce,stepwise,ps,ring"  # the strategies family: the thesis issue's four besides hivemind
SLICE_SHAPE = (2, 1)  # the slice's runs: 2 peers of 1 vCPU (a 1-vCPU peer's compute comes from them)
BASELINE_CPUS = 2     # the slice's baseline: one process on 2 vCPUs (a 2-vCPU peer's compute comes from it)


def families(cores: int, steps: int = STEPS) -> dict[str, list[str]]:
    """Family -> its multirun's overrides: the full grid on >= 16 cores, else the slice at these cores."""
    if cores >= FULL_CORES:
        return {
            "hivemind": ["experiment=thesis_hivemind", "scale=1", f"total_cpus={FULL_CORES}", f"max_steps={steps}"],
            "batch": ["experiment=thesis_hivemind", "scale=1", f"total_cpus={FULL_CORES}", "peers=8",
                      "target_batch_base=2500", "batch_size=32,64,128", f"max_steps={steps}"],
            "strategies": [f"strategy={COMPARED}", "peers=8", "peer_cpus=2", f"max_steps={steps}"],
        }
    return {
        "hivemind": ["experiment=thesis_hivemind", "scale=1", f"total_cpus={cores}", "peers=2",
                     "target_batch_base=625", "max_steps=100"],
        "strategies": [f"strategy={COMPARED}", "peers=2", "peer_cpus=1", "max_steps=100"],
    }


def chosen(plan: dict[str, list[str]], text: str = "") -> dict[str, list[str]]:
    return named(plan, text, "--thesis-families", "family")


def family_overrides(overrides: list[str]) -> list[str]:
    """JOB, then the family's overrides: Hydra keeps a key's last value, so the family's sweeps win."""
    return [*JOB, *overrides]


def multirun(name: str, overrides: list[str], out: Path, repeats: int) -> Path:
    sweep = out / name
    command = [sys.executable, "train.py", "-m", *family_overrides(overrides), f"repeats={repeats}",
               f"hydra.sweep.dir={sweep}"]
    print(f"thesis: {name}: {' '.join(command[2:])}", file=sys.stderr, flush=True)
    subprocess.run(command, cwd=ROOT, check=False)  # failed runs are findings: the report says which
    return sweep


def group_sizes(runs: list[Run]) -> dict[str, dict[str, int]]:
    """kind -> group size -> rounds, over the runs' averaging_rounds (each round once)."""
    found: dict[str, dict[str, int]] = {}
    for run in runs:
        for kind, sizes in run.summary.averaging_rounds.group_sizes.items():
            for size, count in sizes.items():
                found.setdefault(kind, {})[size] = found.setdefault(kind, {}).get(size, 0) + count
    return found


def mean_of(runs: list[Run], figure: Callable[[Summary], float | None]) -> float | None:
    """The mean of figure(summary) over the completed runs that have it."""
    values = [v for r in runs if r.completed and (v := figure(r.summary)) is not None]
    return statistics.fmean(values) if values else None


def comparison_figures(prefix: str, comparison: Comparison | None) -> dict:
    """A configuration against its baseline (metrics/report/compare.py): estimate, 95 % interval, claim."""
    if comparison is None:
        return {prefix: None, f"{prefix}_interval_95": None, f"{prefix}_claim": None}
    ratio = comparison.ratio
    interval = ratio.interval()
    return {prefix: ratio.estimate if ratio.n else None, f"{prefix}_interval_95": list(interval) if interval else None,
            f"{prefix}_claim": comparison.decision, f"{prefix}_blocks": comparison.blocks,
            f"{prefix}_censored": comparison.censored}


def rows_of(sweep: Path) -> list[dict]:
    """One row per configuration and baseline of the sweep: speedup and time-to-target against its baseline."""
    sections, _ = load_runs([sweep])
    rows = []
    for section in sections:
        a = analyse(section)
        figures = {"speedup": Primary(THROUGHPUT)}
        if not section.synthetic:
            config = section.groups[0].first.config
            figures["time_to_target_ratio"] = declare(config | {"report": {"primary": TIME_TO_TARGET}})
        by_figure = {name: {c.this: c for c in family(a.ranking, primary, a.margin) if c.other is c.this.baseline}
                     for name, primary in figures.items()}
        for group in a.ranking + a.references:
            runs = group.runs
            baseline = group.first.is_baseline
            shares = [r.summary.time_breakdown_share or {} for r in runs if r.completed]
            mean_shares = {k: statistics.fmean(s.get(k, 0.0) for s in shares) for k in (shares[0] if shares else {})}
            reached, blocks = reached_count(group)
            row = {"configuration": group.label, "baseline": baseline, "projected": False,
                   "peers": group.first.config["peers"], "peer_cpus": group.first.config["peer_cpus"],
                   "runs": len(runs), "completed": sum(r.completed for r in runs),
                   "reached_target": f"{reached} of {blocks}"}
            for figure, comparisons in by_figure.items():
                row |= comparison_figures(figure, None if baseline else comparisons.get(group))
            rows.append(row | {
                "samples_to_target": mean_of(runs, lambda s: s.samples_to_target),
                "time_per_sample_s": mean_of(runs, lambda s: s.time_per_sample_s),
                "time_breakdown_share": mean_shares,
                "bottleneck": max(mean_shares, key=mean_shares.__getitem__) if mean_shares else None,
                "averaging_group_sizes": group_sizes(runs) or None,
                "averaging_rounds_failed": sum(r.summary.averaging_rounds.failed for r in runs),
            })
    return rows


# --- the projected remainder --------------------------------------------------------------

def configurations(overrides: list[str]) -> list[dict]:
    """The configurations a family's multirun sweeps, expanded as train.py -m would, with shape and knobs."""
    import launchers.config  # noqa: F401  (registers the config's resolvers)
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from launchers.hydra_internals import basic_sweeper

    parser = OverridesParser.create()
    command = family_overrides(overrides)
    plain = [o.input_line for o in parser.parse_overrides(command)
             if not o.is_sweep_override() and o.input_line is not None]  # a parsed override keeps its line
    found = []
    with initialize_config_dir(config_dir=str(launchers.config.CONF_DIR), version_base="1.3"):
        presets = compose(config_name="config", overrides=plain, return_hydra_config=True).hydra.sweeper.params or {}
        parsed = parser.parse_overrides([f"{k}={v}" for k, v in presets.items()] + command)
        swept = {o.get_key_element() for o in parsed if o.is_sweep_override()}
        for combination in basic_sweeper().split_arguments(parsed, None)[0]:
            cfg = compose(config_name="config", overrides=combination)
            found.append({"overrides": [o for o in combination if o.split("=", 1)[0] in swept],
                          "strategy": cfg.strategy.name, "peers": cfg.peers, "peer_cpus": cfg.peer_cpus,
                          "batch_size": cfg.batch_size,
                          "knobs": OmegaConf.to_container(cfg.get(cfg.strategy.name) or {}, resolve=True)})
    return found


@dataclasses.dataclass
class SliceRun:
    """A completed run of the measured slice, with its cost-model parameters."""
    strategy: str
    shape: tuple[int, int]  # (peers, peer_cpus)
    is_baseline: bool
    knobs: dict
    measured: Measured


def slice_runs(sweeps: list[Path], payload_shares: dict[int, float]) -> list[SliceRun]:
    """The completed runs under the slice's sweeps (runs moved aside by a resumed sweep left out)."""
    found = []
    for path in find_runs(sweeps)[0]:
        summary = Summary.load(path)
        if summary.status != "completed":
            continue
        config = summary.config
        try:
            measured = measure(path, payload_shares)
        except ValueError as exc:
            print(f"thesis: {path} left out of the projection: {exc}", file=sys.stderr)
            continue
        found.append(SliceRun(config["strategy"]["name"], (config["peers"], config["peer_cpus"]),
                              bool(summary.is_baseline), summary.strategy_knobs or {}, measured))
    return found


def varied_knobs(grid: list[dict], strategy: str) -> set[str]:
    """The strategy's knobs that vary across the grid, target_batch_size apart: a slice run must match them."""
    knobs = [c["knobs"] for c in grid if c["strategy"] == strategy]
    return {k for k in set().union(*knobs) if k != "target_batch_size" and len({repr(c.get(k)) for c in knobs}) > 1}


def mean_measured(runs: list[SliceRun]) -> Measured:
    """The first run's parameters with compute, hidden, server, size and overlap averaged over the runs."""
    def mean(field: str) -> float:
        return statistics.fmean(getattr(r.measured, field) for r in runs)
    return dataclasses.replace(runs[0].measured, compute_s=mean("compute_s"), hidden_s=mean("hidden_s"),
                               server_s=mean("server_s"), size_bytes=mean("size_bytes"), overlap=mean("overlap"))


def peer_compute(config: dict, own: list[SliceRun], runs: list[SliceRun], cores: int) -> tuple[float | None, str]:
    """Compute per step of one of the configuration's peers (a 1-vCPU peer's from its strategy's slice runs, a
    2-vCPU peer's from the slice's baseline; scaled per sample), and where it comes from, or why there is none."""
    cpus, batch = config["peer_cpus"], config["batch_size"]
    if cpus == SLICE_SHAPE[1]:
        sources, what = own, f"the slice's {SLICE_SHAPE[0]} x {SLICE_SHAPE[1]} {config['strategy']} runs"
    elif cpus == BASELINE_CPUS:
        sources = [r for r in runs if r.is_baseline and r.shape[0] * r.shape[1] == BASELINE_CPUS]
        what = f"the slice's one-process baseline on {BASELINE_CPUS} vCPUs"
    else:
        return None, (f"a peer with {cpus} vCPUs: its compute per step cannot be measured on {cores} cores (thread "
                      "scaling is what the thesis varies; not extrapolated)")
    if not sources:
        return None, f"no completed run of {what} (--thesis-families, or the runs failed)"
    measured_batch = statistics.fmean(r.measured.batch for r in sources)
    per_sample = statistics.fmean(r.measured.compute_s / r.measured.batch for r in sources)
    scaled = "" if measured_batch == batch else (f"; measured at batch {measured_batch:g}, taken per sample "
                                                  f"x {batch} (compute assumed proportional to the batch)")
    return per_sample * batch, f"{what} ({len(sources)}): {per_sample * batch:.4g} s per step{scaled}"


def projected_rows(grid: list[dict], runs: list[SliceRun], link: Link, cores: int,
                   evidence: Evidence) -> list[dict]:
    """One row per full-grid configuration and baseline: its cost model's projection on `link`, or why none."""
    rows = []
    for config in grid:
        peers, cpus, batch = config["peers"], config["peer_cpus"], config["batch_size"]
        row = {"projected": True, "family": config.get("family"), "configuration": " ".join(config["overrides"]),
               "strategy": config["strategy"], "peers": peers, "peer_cpus": cpus, "batch_size": batch,
               "link": dataclasses.asdict(link), "speedup": None,
               "speedup_unknown": f"the equal-resource baseline, one process with {peers * cpus} vCPUs (batch "
                                  f"{peers * batch}), cannot be measured on {cores} cores; not extrapolated"}
        varied = varied_knobs(grid, config["strategy"])
        own = [r for r in runs if r.strategy == config["strategy"] and not r.is_baseline and r.shape == SLICE_SHAPE
               and all(r.knobs.get(k) == config["knobs"].get(k) for k in varied)]
        compute, source = peer_compute(config, own, runs, cores)
        if compute is not None and not own:
            compute, source = None, (f"no completed {SLICE_SHAPE[0]} x {SLICE_SHAPE[1]} slice run of "
                                     f"{config['strategy']} with these knobs to take S and its overheads from")
        row["slice_runs"] = len(own)
        if compute is None:
            rows.append(row | {"step_s": None, "not_projected": source})
            continue
        params = mean_measured(own)
        m = dataclasses.replace(params, compute_s=compute, hidden_s=min(params.hidden_s, compute), batch=batch,
                                knobs=config["knobs"], samples_to_target=None, link=None,
                                payload_shares=evidence.payload_shares)
        validation = evidence.validation(config["strategy"])
        try:
            (projected,) = project_link(m, link, [peers], validation)["rows"]
        except ValueError as exc:
            rows.append(row | {"step_s": None, "not_projected": str(exc)})
            continue
        if projected["withheld"]:
            rows.append(row | {"step_s": None, "not_projected": projected["withheld"]})
            continue
        rows.append(row | {
            "not_projected": None, "compute_s": compute, "compute_from": source, "size_bytes": m.size_bytes,
            "parameters_from": [str(r.measured.run) for r in own],
            "payload_share": payload_share(evidence.payload_shares, link.mtu),
            "step_s": projected["step_s"], "band_step_s": projected["band_step_s"],
            "wire_over_compute": projected["wire_over_compute"],
            "unvalidated": projected["unvalidated"], "unvalidated_why": projected["unvalidated_why"],
            "throughput_samples_per_s": projected["throughput_samples_per_s"],
            "validation": {"cases": validation.cases, "largest_peers": validation.largest_peers,
                           "rates_mbit": validation.rates_mbit, "errors": validation.errors} if validation else None,
        })
    baselines = {(c["peers"], c["peer_cpus"], c["batch_size"]): c.get("family") for c in grid}
    for (peers, cpus, batch), name in baselines.items():
        rows.append({"projected": True, "family": name, "strategy": "single", "peers": peers, "peer_cpus": cpus,
                     "batch_size": peers * batch, "link": None, "step_s": None,
                     "configuration": f"equal-resource baseline of {peers} x {cpus}: one process, {peers * cpus} "
                                      f"vCPUs, batch {peers * batch}",
                     "not_projected": f"one process with {peers * cpus} vCPUs: its compute per step cannot be "
                                      f"measured on {cores} cores (thread scaling; not extrapolated)"})
    return [r | {"projected": r["step_s"] is not None} for r in rows]  # a refused row carries no number


def projected_remainder(sweeps: list[Path], link: Link, cores: int, evidence: Evidence) -> dict:
    grid = [c | {"family": name} for name, overrides in families(FULL_CORES).items()
            for c in configurations(overrides)]
    rows = projected_rows(grid, slice_runs(sweeps, evidence.payload_shares), link, cores, evidence)
    return {"link": dataclasses.asdict(link), "from_sweeps": [str(s) for s in sweeps], **projected_counts(rows),
            "rows": rows}


def projected_counts(rows: list[dict]) -> dict:
    return {"projected": sum(r["step_s"] is not None for r in rows),
            "not_projected": sum(r["step_s"] is None for r in rows)}


STALE = ("projected with the link's nominal rate, before the payload-share conversion (link_goodput) "
         "existed: run `python bench/run.py thesis` again to project it")


UNPLACED = ("projected before the validated region was drawn on wire time over compute: run `python bench/run.py "
            "thesis` again to place it")


REJUDGE = ("refused when its model had failed an earlier validation ({earlier}); today's validation does not say "
           "so: run `python bench/run.py thesis` again to project it")


def judged(row: dict, evidence: Evidence) -> dict:
    """A projected row held to today's evidence: no number where its strategy's model failed its validation or it
    predates the payload-share conversion (STALE); REJUDGE where a failure that refused it is gone."""
    validation = evidence.validation(row["strategy"])
    failed = validation.failed if validation else None
    if row.get("step_s") is None:
        earlier = row.get("not_projected") or ""
        if earlier.startswith(f"{row['strategy']}'s cost model failed its validation"):
            return row | {"projected": False, "not_projected": failed or REJUDGE.format(earlier=earlier)}
        return row | {"projected": False}
    if why := failed or (None if "payload_share" in row else STALE):
        return row | {"projected": False, "step_s": None, "band_step_s": None, "throughput_samples_per_s": None,
                      "not_projected": why}
    if "wire_over_compute" not in row:
        return row | {"unvalidated": True, "unvalidated_why": [UNPLACED], "band_step_s": None}
    beyond = unvalidated(validation, row["peers"], Link(**row["link"]), row["wire_over_compute"], row["size_bytes"])
    band = validation.band(row["step_s"]) if validation and not beyond else None
    return row | {"projected": True, "unvalidated": bool(beyond), "unvalidated_why": beyond, "band_step_s": band}


def merge(kept: dict, new: dict, evidence: Evidence | None = None) -> dict:
    """The saved entry with a new run's families and projected rows in place of the saved ones (merge_projected)."""
    families_now = (kept.get("families") or {}) | (new.get("families") or {})
    speedups = [r["speedup"] for f in families_now.values() for r in f["rows"]
                if r.get("speedup") and not r.get("baseline")]
    renewed = set(new.get("families") or {})  # the sweeps behind the families kept, then the new run's
    sweeps = {s["path"]: s for s in kept.get("sweeps", []) if s["summary"].removeprefix("families.") not in renewed}
    sweeps |= {s["path"]: s for s in new.get("sweeps", [])
               if s["path"] not in sweeps or s["summary"] != "projected_remainder"}
    return new | {"families": families_now, "ratio": max(speedups, default=0.0), "sweeps": list(sweeps.values()),
                  "projected_remainder": merge_projected(kept, new, evidence)}


def merge_projected(kept: dict, new: dict, evidence: Evidence | None = None) -> dict | None:
    """The new projected remainder; a configuration without slice runs keeps its saved row, judged."""
    fresh, saved = new.get("projected_remainder"), kept.get("projected_remainder")
    if not fresh or not saved:
        return fresh
    evidence = evidence or load_evidence()
    saved_rows = {(r["family"], r["configuration"]): judged({"measured_at": kept.get("measured_at"),
                                                              "machine": kept.get("machine")} | r, evidence)
                  for r in saved["rows"] if r.get("step_s") is not None}
    rows = [saved_rows.get((r["family"], r["configuration"]), r) if r.get("slice_runs") == 0 else r
            for r in fresh["rows"]]
    return fresh | {"rows": rows, **projected_counts(rows),
                    "from_sweeps": sorted({*fresh["from_sweeps"], *saved.get("from_sweeps", [])})}


def add_arguments(parser: argparse._ActionsContainer) -> None:
    parser.add_argument("--thesis-families", dest="thesis_names", metavar="NAMES",
                        help="the families to run, a comma list (default: all)")
    parser.add_argument("--thesis-dir", dest="thesis_out", type=Path, metavar="DIR",
                        help="one sweep per family; a rerun with the same DIR keeps completed runs (default: "
                             "multirun/thesis-DATE)")
    parser.add_argument("--thesis-steps", type=int, metavar="N",
                        help=f"max_steps of a full-grid run (default {STEPS}; the slice runs 100)")
    parser.add_argument("--thesis-repeats", type=int, metavar="N", help=f"paired blocks (default {REPEATS})")
    parser.add_argument("--thesis-link", metavar="LINK",
                        help=f"the projected remainder's link: a conf/network preset or MBIT[,LATENCY_MS[,MTU]] "
                             f"(default {DEFAULT_LINK})")


def run(names: str = "", out: Path | None = None, steps: int = STEPS, repeats: int = REPEATS,
        link: str = DEFAULT_LINK) -> dict:
    """The families `names` names (a comma list; empty: all), one sweep each under `out`."""
    started = time.monotonic()
    cores = len(os.sched_getaffinity(0))
    out = out or ROOT / "multirun" / f"thesis-{time.strftime('%Y%m%d-%H%M%S')}"
    full = cores >= FULL_CORES
    remainder_link = parse_link(link)  # a bad link fails before the runs
    evidence = load_evidence()  # and so does a results file without the payload share
    plan = chosen(families(cores, steps), names)
    results = {name: rows_of(multirun(name, overrides, out, repeats)) for name, overrides in plan.items()}
    speedups = [r["speedup"] for rows in results.values() for r in rows if r["speedup"] and not r["baseline"]]
    sweeps = [out / name for name in families(cores) if (out / name).is_dir()]
    return {
        "name": "thesis",
        "ratio": max(speedups, default=0.0),
        "goal": "report: speedup over one process with all the CPUs, with 95 % intervals (no goal)",
        "scope": "full grid" if full else f"slice on {cores} cores (docs/thesis.md)",
        "families": {name: {"measured_at": time.strftime("%Y-%m-%d %H:%M:%S"), "overrides": plan[name], "rows": rows}
                     for name, rows in results.items()},  # each family dated: a later run may keep it beside its own
        "projected_remainder": None if full else projected_remainder(sweeps, remainder_link, cores, evidence),
        "sweeps": [{"path": str(out / name), "kept": False,  # run folders stay out of the repository
                    "summary": f"families.{name}" if name in plan else "projected_remainder"}
                   for name in families(cores) if name in plan or out / name in sweeps],
        "setup": f"{cores} cores, {repeats} paired blocks, {' '.join(JOB)}, families {', '.join(plan)}; ratio = the "
                 f"best measured speedup's estimate"
                 + ("" if full else f"; the remainder projected on {remainder_link.label}"),
        "claims_alpha": ALPHA,
        "duration_s": time.monotonic() - started,
    }
