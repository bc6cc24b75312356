#!/usr/bin/env python
"""The headline as typed (`python train.py -m strategy=ring,stepwise,ps`), measured in independent sweeps on this
machine alone, and whether their answers replicate (docs/benchmarks.md). Sweeps go into today's first folders without
a report (a half-done one is resumed); the result replaces bench/results/headline.json (--out: another folder)."""
import argparse
import dataclasses
import itertools
import json
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.results import load, portable, recorded, save  # noqa: E402
from bench.run import add_saving_options, script_parser  # noqa: E402
from metrics.recording.machine import describe_machine, fingerprint  # noqa: E402
from metrics.recording.methods import methods  # noqa: E402
from metrics.recording.rundir import SWEEP_PLAN  # noqa: E402
from metrics.report.baselines import load_runs  # noqa: E402
from metrics.report.runs import Run, Section, sweep_efficiency  # noqa: E402
from metrics.report.stats import EQUIVALENT, FASTER, SLOWER, Ratio  # noqa: E402
from metrics.report.verdict import left_out_runs, noise_of, section_verdict, unsteady  # noqa: E402

HEADLINE = ["strategy=ring,stepwise,ps"]  # README's headline command, as typed
SEPARATED = (FASTER, SLOWER)
WALL_TIME_GOAL = 1.5  # the longest sweep's wall time / the headline's on loopback, at most
DESIGN_GOAL = 0.6  # the headline's elapsed time / the fixed-horizon design's (eval_in_training=false), at most
DECIDED = (FASTER, SLOWER, EQUIVALENT)
EFFICIENCY_GOAL = 0.85  # the sweep efficiency (methods.yaml report: sweep efficiency), at least
ONE_AFTER_S = 900  # two sweeps at most this far apart (the later's first run after the earlier's last) ran one after
                   # the other
RUNS_WALL = ("the sum of its runs' wall clocks (launch to end, evaluation included; Hydra's start-up between runs and "
             "the report left out)")  # a sweep's wall time, for the sweeps and the loopback headline alike


def keep_sample(folder: Path, name: str) -> list[str]:
    """The sweep's report.md and report.html as docs/samples/NAME-report.*, the folder's path replaced by its name."""
    kept = [f"docs/samples/{name}-report.{suffix}" for suffix in ("md", "html")]
    for sample, suffix in zip(kept, ("md", "html")):
        text = (folder / f"report.{suffix}").read_text()
        (ROOT / sample).write_text(text.replace(str(folder.resolve()), folder.name))
    return kept


def run_sweep(folder: Path, lock: str, command: list[str] = HEADLINE) -> float:
    """Run (or resume) a multirun, the headline by default, into folder; its wall clock in seconds."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "train.py", "-m", *command, f"hydra.sweep.dir={folder}", f"lock={lock}"],
                          cwd=ROOT)
    if done.returncode:
        raise RuntimeError(f"the sweep {' '.join(command)} into {folder} exited {done.returncode}")
    return time.perf_counter() - started


def runs_s(runs: list[Run]) -> float:
    """The sum of the runs' own wall clocks (RUNS_WALL): a resumed sweep's pause is no user's wait."""
    return sum(r.summary.wall_s for r in runs)


def span_end(runs: list[Run]) -> float:
    """The last run's end, seconds since the epoch."""
    return max(r.summary.started_at + r.summary.wall_s for r in runs)


def ended_at(runs: list[Run]) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(span_end(runs)))


def runs_in(sections: list[Section]) -> list[Run]:
    return [run for section in sections for group in section.groups for run in group.runs]


def block_walls(runs: list[Run]) -> dict[str, float]:
    """Each block's RUNS_WALL: the sum of its runs' own wall clocks, by block number."""
    walls: dict[str, float] = {}
    for run in runs:
        block = str(run.block[1])
        walls[block] = walls.get(block, 0.0) + run.summary.wall_s
    return walls


def phases_by_configuration(section: Section) -> dict[str, dict[str, float]]:
    """Each configuration's mean wall_phases_s over its runs (seconds, summary.json's phases)."""
    means = {}
    for group in section.groups:
        phases = [run.summary.wall_phases_s.seconds() for run in group.runs]
        means[group.label] = {phase: round(sum(p[phase] for p in phases) / len(phases), 1) for phase in phases[0]}
    return means


def efficiency_of(runs: list[Run]) -> dict | None:
    """The sweep efficiency (methods.yaml report: sweep efficiency) against its goal (None: no elapsed recorded)."""
    if not (found := sweep_efficiency(runs)):
        return None
    value, elapsed = found
    return {"value": value, "elapsed_s": elapsed, "goal": EFFICIENCY_GOAL, "goal_met": value >= EFFICIENCY_GOAL}


def figures_of(folder: Path, wall_s: float | None) -> dict:
    """One sweep's answer, from the report's own analysis."""
    sections, left_out = load_runs([folder])
    if len(sections) != 1:
        raise RuntimeError(f"{folder}: expected one (dataset, model) section, found {len(sections)}")
    verdict, analysis = section_verdict(sections[0])
    runs = runs_in(sections)
    return {
        "folder": portable(str(folder.resolve())),
        "measured_at": ended_at(runs),
        "runs": len(runs),
        "wall_s": wall_s if wall_s is not None else runs_s(runs),
        "wall_method": "the command's wall clock" if wall_s is not None else RUNS_WALL,
        "runs_from_to": [min(r.summary.started_at for r in runs), span_end(runs)],  # epoch s, pauses between sessions in
        "block_wall_s": block_walls(runs),
        "primary": analysis.primary.text,
        "answer": verdict.answer,
        "claims_withheld": bool(analysis.refusals or unsteady(analysis.controls)),
        "ranking": [g.label for g in analysis.ranking],
        "comparisons": [{"this": c.this.label, "other": c.other.label,
                         "ratio": c.ratio.estimate if c.ratio.n else None,  # no paired block: no ratio
                         "interval_95": c.ratio.interval() if c.ratio.n else None,
                         "adjusted_p": c.adjusted_p, "claim": c.decision, "blocks": c.blocks,
                         "censored": c.censored, "against_baseline": c.other.first.is_baseline}
                        for c in analysis.comparisons],
        "links": verdict.network,
        "left_out": left_out_runs(analysis),
        "not_loaded": left_out,
        "noise": dataclasses.asdict(noise) if (noise := noise_of(analysis)) else None,  # and what its blocks detect
        "sweep_efficiency": efficiency_of(runs),
        "wall_phases_s": phases_by_configuration(sections[0]),
    }


def replication(first: dict, second: dict) -> dict:
    pairs = {(c["this"], c["other"]): c for c in first["comparisons"]}
    contradictions, separated = [], []
    for c in second["comparisons"]:
        other = pairs.get((c["this"], c["other"]))
        if other is None:
            continue
        claims = {other["claim"], c["claim"]}
        if claims == set(SEPARATED):
            contradictions.append(f"{c['this']} vs {c['other']}: {other['claim']} / {c['claim']}")
        elif len(claims) == 1 and c["claim"] in SEPARATED and not c["against_baseline"]:
            separated.append(f"{c['this']} vs {c['other']}: {c['claim']}")
    withheld = first["claims_withheld"] or second["claims_withheld"]  # a verdict that refused its claims
    return {"same_ranking": first["ranking"] == second["ranking"], "contradictions": contradictions,
            "separated_averaging_pairs": separated, "claims_withheld": withheld,
            "replicates": (first["ranking"] == second["ranking"] and not contradictions and len(separated) >= 2
                           and not withheld)}


DESIGN_GOAL_TEXT = (f"elapsed time (launch to report) <= {DESIGN_GOAL}x the fixed-horizon design's at the same blocks, "
                    "measured alone one after the other; every comparison it decides decided alike")


def against_fixed_design(headline: dict, fixed: dict) -> dict:
    """The headline, whose runs end at the target, against the fixed-horizon design measured one after the other on
    this machine: the elapsed-time ratio, each block's, and every comparison the fixed design decides decided alike."""
    claims = {(c["this"], c["other"]): c["claim"] for c in headline["comparisons"]}
    decided = [c for c in fixed["comparisons"] if c["claim"] in DECIDED]
    otherwise = [f"{c['this']} vs {c['other']}: {c['claim']} / {claims.get((c['this'], c['other']), 'absent')}"
                 for c in decided if claims.get((c["this"], c["other"])) != c["claim"]]
    ratio = headline["wall_s"] / fixed["wall_s"]
    (start, end), (fixed_start, fixed_end) = headline["runs_from_to"], fixed["runs_from_to"]
    apart_s = max(start - fixed_end, fixed_start - end)  # the gap between the two sweeps
    walls, fixed_walls = headline.get("block_wall_s", {}), fixed.get("block_wall_s", {})
    return {"headline_folder": headline["folder"], "sweep": fixed, "ratio": ratio,
            "block_ratios": {b: walls[b] / fixed_walls[b] for b in sorted(walls) if b in fixed_walls},
            "decided": len(decided), "decided_otherwise": otherwise,
            "apart_s": apart_s, "one_after_the_other": apart_s <= ONE_AFTER_S, "goal": DESIGN_GOAL_TEXT,
            "goal_met": ratio <= DESIGN_GOAL and not otherwise and apart_s <= ONE_AFTER_S}


def against_fixed_designs(sweeps: list[dict], fixed: list[dict]) -> dict:
    """Each fixed-design sweep against the headline sweep it was measured beside (the last len(fixed) sweeps, in
    order): every pair's goal met, and the blocks' ratios over all pairs (RUNS_WALL per block; their geometric mean
    and 95 % t-interval describe the spread, the goal is each pair's)."""
    pairs = [against_fixed_design(headline, design) for headline, design in zip(sweeps[-len(fixed):], fixed,
                                                                               strict=True)]
    blocks = Ratio([r for pair in pairs for r in pair["block_ratios"].values()])
    return {"pairs": pairs, "block_ratio": blocks.estimate if blocks.n else None,
            "block_interval_95": blocks.interval(), "blocks": blocks.n,
            "goal": DESIGN_GOAL_TEXT + ", in every pair of sweeps",
            "goal_met": all(pair["goal_met"] for pair in pairs)}


def goal_met(ratio: float | None, design: dict | None, replicated: dict | None) -> bool | None:
    """The entry's goals, each where measured (the wall time against loopback, replication, the fixed design's goal):
    all met; None where none was measured."""
    measured = [met for met in (None if ratio is None else ratio <= WALL_TIME_GOAL,
                                None if replicated is None else replicated["replicates"],
                                None if design is None else design["goal_met"]) if met is not None]
    return all(measured) if measured else None


def on_this_machine(machine: dict | None) -> bool:
    return machine is not None and describe_machine(machine) == describe_machine(fingerprint())


def measured_loopback(folder: Path) -> dict:
    """The headline on loopback, measured: a sweep folder whose planned runs all completed on loopback."""
    sections, not_loaded = load_runs([folder])
    runs = runs_in(sections)
    planned = len(json.loads((folder / SWEEP_PLAN).read_text())["jobs"])
    if not_loaded or len(runs) != planned:
        raise RuntimeError(f"{folder}: {len(runs)} of its {planned} planned runs completed; resume it first")
    linked = sorted({r.summary.link.kind or "unrecorded" for r in runs if not r.summary.is_baseline})
    if linked != ["loopback"]:
        raise RuntimeError(f"{folder}: not the headline on loopback (its runs' links: {', '.join(linked)})")
    return {"folder": portable(str(folder.resolve())), "runs": len(runs), "wall_s": runs_s(runs),
            "measured_at": ended_at(runs), "machine": fingerprint(),
            "method": f"measured: {RUNS_WALL}"}


def loopback_of(results: Path, folder: Path | None) -> dict | None:
    """The wall-time ratio's denominator: the sweep given, else one recorded here (link_rate's estimate runs every
    configuration to max_steps, so it is no measure of runs that end at the target)."""
    if folder:
        return measured_loopback(folder)
    saved = load("headline", results)
    recorded_sweep = (saved.body.get("loopback") if saved else None) or {}
    if recorded_sweep.get("folder") and on_this_machine(recorded_sweep.get("machine")):
        return recorded_sweep
    return None


def recorded_answer(results: Path, setup: str, new_folder: str) -> dict | None:
    """The latest other sweep of the saved entry measured on this machine with this setup."""
    entry = load("headline", results)
    if not entry or entry.body.get("setup") != setup:
        return None
    answers = [a for a in entry.body["answers"] if a["folder"] != new_folder and on_this_machine(a["machine"])]
    return max(answers, key=lambda a: a["measured_at"], default=None)


def describe(sweep: dict) -> str:
    lines = [f"{sweep['folder']}: {sweep['runs']} runs, {sweep['wall_s'] / 60:.0f} min ({sweep['wall_method']})",
             f"  {sweep['primary']}", f"  ranking: {', '.join(sweep['ranking'])}", f"  answer: {sweep['answer']}"]
    for c in sweep["comparisons"]:
        interval = "no interval" if c["interval_95"] is None else "[{:.2f}, {:.2f}]".format(*c["interval_95"])
        ratio = "n/a" if c["ratio"] is None else f"{c['ratio']:.2f}x"
        lines.append(f"  {c['this']} vs {c['other']}: {ratio} {interval}, {c['claim']} ({c['blocks']} blocks, "
                     f"{c['censored']} censored)")
    return "\n".join(lines)


def unfinished_folders(parent: Path, day: date, count: int) -> list[Path]:
    """The first `count` of parent/headline-DAY-1, -2, ... without a report: one stopped half-way is resumed, a
    finished one kept."""
    named = (parent / f"headline-{day}-{i}" for i in itertools.count(1))
    return list(itertools.islice((f for f in named if not (f / "report.md").exists()), count))


def run(args: argparse.Namespace) -> None:
    folders = args.from_
    if args.sweeps:
        folders = unfinished_folders(ROOT / "multirun", date.today(), args.sweeps)
    walls = [run_sweep(f, args.lock) for f in folders] if args.sweeps else args.wall_s or [None] * len(folders)
    sweeps = [figures_of(folder, wall) for folder, wall in zip(folders, walls, strict=True)]
    setup = ("python train.py -m " + " ".join(HEADLINE) + " (defaults: the default link, repeats, control arm; runs "
             "end at the target)")
    if len(sweeps) == 1 and not args.alone and (earlier := recorded_answer(args.out, setup, sweeps[0]["folder"])):
        print(f"checked against the sweep recorded {earlier['measured_at']} ({earlier['folder']})")
        sweeps.insert(0, earlier)
    for sweep in sweeps:
        print(describe(sweep), flush=True)
    loopback = loopback_of(args.out, args.loopback_from)
    named = [{"path": s["folder"], "kept": False, "summary": f"answers.{i}"} for i, s in enumerate(sweeps)]
    if loopback and "folder" in loopback:
        named.append({"path": loopback["folder"], "kept": False, "summary": "loopback"})
    wall_ratio = max(s["wall_s"] for s in sweeps) / loopback["wall_s"] if loopback else None
    result = {"name": "headline", "ratio": wall_ratio,
              "goal": f"wall time <= {WALL_TIME_GOAL}x the headline's on loopback (ratio: the longest sweep / the "
                      "headline on loopback on the same machine, as `loopback` says: measured or estimated); two "
                      "sweeps: the same ranking, no contradicting claims, at least two averaging configurations "
                      "separated after Holm; against the fixed-horizon design, its goal (fixed_design); each where "
                      "measured",
              "loopback": loopback,
              "setup": setup, "answers": sweeps,
              "samples": keep_sample(folders[-1], "headline") if not args.no_save else [],
              "sweeps": named,
              "method": methods("bench")["headline"]}
    replicated = result["replication"] = replication(*sweeps) if len(sweeps) == 2 else None  # one sweep: not measured
    design = None
    if args.fixed_from:
        fixed = [figures_of(f, wall) for f, wall in zip(args.fixed_from, args.fixed_wall_s or [None] * len(
            args.fixed_from), strict=True)]
        design = result["fixed_design"] = against_fixed_designs(sweeps, fixed)
        named.extend({"path": f["folder"], "kept": False, "summary": f"fixed_design.pairs.{i}.sweep"}
                     for i, f in enumerate(fixed))
        print(json.dumps({k: v for k, v in design.items() if k != "pairs"} | {
            "pairs": [{k: v for k, v in pair.items() if k != "sweep"} for pair in design["pairs"]]}, indent=1))
    result["goal_met"] = goal_met(wall_ratio, design, replicated)
    if result["replication"]:
        print(json.dumps(result["replication"], indent=1))
    if not args.no_save:
        print(f"saved {save(recorded(result), args.out)}")


def main() -> int:
    parser = script_parser(__doc__)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--sweeps", type=int, choices=(1, 2), help="run this many sweeps, one after the other")
    source.add_argument("--from", dest="from_", nargs="+", type=Path, metavar="DIR",
                        help="record these sweep folders (one or two) instead of running")
    parser.add_argument("--alone", action="store_true",
                        help="one sweep: record it without checking it against the last one recorded")
    parser.add_argument("--wall-s", type=float, nargs="+", metavar="S",
                        help="with --from: each sweep's command wall clock (launch to report), measured outside")
    parser.add_argument("--fixed-from", type=Path, nargs="+", metavar="DIR",
                        help="the fixed-horizon design (eval_in_training=false), completed sweeps, each measured one "
                             "after (or before) its headline sweep, the last ones in order: the elapsed-time "
                             "comparison")
    parser.add_argument("--fixed-wall-s", type=float, nargs="+", metavar="S",
                        help="their command wall clocks (launch to report), one per --fixed-from folder")
    parser.add_argument("--loopback-from", type=Path, metavar="DIR",
                        help="the headline on loopback, a completed sweep: the wall-time ratio's denominator")
    add_saving_options(parser)
    args = parser.parse_args()
    if args.from_ and len(args.from_) > 2:
        parser.error("--from takes one or two sweep folders")
    if args.wall_s and len(args.wall_s) != len(args.from_ or []):
        parser.error("--wall-s takes one wall clock per --from folder")
    if args.fixed_wall_s and len(args.fixed_wall_s) != len(args.fixed_from or []):
        parser.error("--fixed-wall-s takes one wall clock per --fixed-from folder")
    if args.fixed_from and len(args.fixed_from) > len(args.from_ or [None] * (args.sweeps or 0)):
        parser.error("--fixed-from takes at most one folder per headline sweep")
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
