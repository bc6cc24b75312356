#!/usr/bin/env python
"""Rewrite the generated blocks of README.md and docs/*.md from conf/ and bench/results/ (docs/usage.md): a block
lies between `<!-- generated:SPEC -->` and `<!-- end generated:SPEC -->`, SPEC a generator and its arguments.

    python docs/generate.py            # rewrite every block and screenshot docs/samples/*.html (make docs)
    python docs/generate.py --check    # exit 1 naming each stale block, change nothing
"""
import argparse
import calendar
import re
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
import sys
from pathlib import Path
from typing import Any, NoReturn

import jinja2
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.headline import DESIGN_GOAL, WALL_TIME_GOAL  # noqa: E402
from bench.noise_scale import log_sd  # noqa: E402
from bench.results import BenchResult, git, load_all, source  # noqa: E402
from bench.run import BENCHMARKS  # noqa: E402
from launchers.config import strategy_by_name  # noqa: E402
from launchers.schema import RULES, accepted  # noqa: E402
from metrics.recording.evidence import EVIDENCE  # noqa: E402
from metrics.projection.evidence import validations  # noqa: E402
from metrics.recording.machine import describe_machine  # noqa: E402
from metrics.report.noise import PlanningNoise, planning_noise  # noqa: E402
from metrics.report.primary import Primary  # noqa: E402
from metrics.report.stats import BASIS, OWN_MACHINE, detectable, power  # noqa: E402

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^<!-- generated:(?P<spec>[^>]*?) -->\n(?P<body>.*?)^<!-- end generated:(?P<end>[^>]*?) -->$",
                   re.S | re.M)  # markers stand on lines of their own
OPEN = re.compile(r"^<!-- (end )?generated:", re.M)


# --- knob tables from conf/ -------------------------------------------------------------
KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w]*):(?: +(?P<value>[^#]*?))? *(?:# ?(?P<comment>.*))?$")


def knobs_of(path: Path) -> list[tuple[str, str, str]]:
    """(dotted key as users write it, value, comment) for every knob of a conf yaml file, wiring left out."""
    text = path.read_text()
    group = path.parent.name if path.parent != ROOT / "conf" and "@package _global_" not in text else None
    rows: list[tuple[str, str, str]] = []
    parents: list[tuple[int, str]] = []
    skip_below: int | None = None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith(("#", "-")):
            continue
        match = KEY.match(line)
        indent = len(line) - len(line.lstrip())
        if skip_below is not None and indent > skip_below:
            continue  # inside a block scalar or a skipped mapping
        skip_below = None
        if not match:
            continue
        while parents and parents[-1][0] >= indent:
            parents.pop()
        key = ".".join([p[1] for p in parents] + [match["key"]])
        value = (match["value"] or "").strip()
        if key.split(".")[0] in ("defaults", "hydra") or key in ("strategy.name", "strategy.target",
                                                                  "strategy.cost_model"):
            skip_below = indent
            continue
        if value in ("", "|", ">"):
            parents.append((indent, match["key"]))
            if value:
                skip_below = indent
            continue
        rows.append((f"{group}.{key}" if group else key, value, (match["comment"] or "").strip()))
    return rows


def header_of(path: Path) -> str:
    """A conf file's opening comment without its examples (indented lines), up to its list of knobs."""
    lines = []
    for line in path.read_text().splitlines():
        text = line.removeprefix("# ").rstrip()
        if not line.startswith("#") or text.startswith("Knobs"):
            break
        if "@package" not in text and not text.startswith("  "):
            lines.append(text)
    return " ".join(lines)


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def knobs(path: str, *selection: str) -> str:
    """The knobs of one conf file; `selection`: dotted prefixes to show (all when none), `!prefix` to leave out."""
    shown = [p for p in selection if not p.startswith("!")]
    hidden = [p[1:] for p in selection if p.startswith("!")]

    def under(key: str, prefix: str) -> bool:
        return key == prefix or key.startswith(prefix + ".")

    rows = [(k, v, c) for k, v, c in knobs_of(ROOT / path)
            if (not shown or any(under(k, p) for p in shown)) and not any(under(k, p) for p in hidden)]
    if not rows:
        raise ValueError(f"knobs {path} {' '.join(selection)}: no knob matches")
    rules = dict(RULES)
    if Path(path).parent.name == "strategy":
        name = Path(path).stem
        rules |= {f"{name}.{knob}": rule for knob, rule in strategy_by_name(name).rules.items()}
    body = [[f"`{key}`", f"`{cell(value)}`", cell(accepted(yaml.safe_load(value), rules.get(key))), cell(comment)]
            for key, value, comment in rows]
    return "\n".join([f"From `{path}`:", "", *table(["knob", "default", "accepts", "meaning"], body)])


def groups() -> str:
    """Every config group of conf/ with its options and each option's opening comment."""
    return "\n".join(table(["group", "option", "what it is"], [
        [f"`{group.name}`", f"`{option.stem}`", cell(header_of(option))]
        for group in sorted(p for p in (ROOT / "conf").iterdir() if p.is_dir() and p.name != "hydra")
        for option in sorted(group.glob("*.yaml"))]))


# --- staleness: a result older than a change to the code that made it ---------------------
# Each entry of bench/results/ -> the files of the benchmark that makes it: its module, then the files it runs as its
# own (another arm, the benchmark it wraps, the verdict's tests that decide its answers). Shared helpers
# (bench/jobs.py, the rest of the framework) are not counted.
VERDICT = ["metrics/report/compare.py", "metrics/report/stats.py"]
PRODUCERS = {
    "collective_efficiency": ["bench/collectives.py"], "comm_cpu": ["bench/comm_cpu.py"],
    "ddp_overlap": ["bench/ddp_overlap.py"], "device_check": ["bench/device_check.py"],
    "emulation": ["bench/emulation.py"], "emulation_fidelity": ["bench/emulation.py"],
    "evaluation_share": ["bench/evaluation_share.py"], "field": ["bench/field.py"],
    "framework_overhead": ["bench/overhead.py", "bench/raw_loop.py"], "headline": ["bench/headline.py", *VERDICT],
    "hivemind_command": ["bench/hivemind_command.py", "bench/evaluation_share.py"], "link_cpu": ["bench/link_cpu.py"],
    "link_goodput": ["bench/goodput.py"], "link_rate": ["bench/link_rate.py"], "noise": ["bench/noise.py"],
    "noise_scale": ["bench/noise_scale.py"], "pause_shift": ["bench/pause_shift.py"],
    "primary_noise": ["bench/primary_noise.py"], "projection_validation": ["bench/projection.py"],
    "quick": ["bench/quick.py", "bench/headline.py", *VERDICT], "reference_cost": ["bench/reference_cost.py"],
    "reference_variance": ["bench/reference_variance.py"], "sampler_overhead": ["bench/sampler_cost.py"],
    "stepwise_vs_ring": ["bench/stepwise_vs_ring.py"], "thesis": ["bench/thesis.py"],
    "verdict_simulation": ["bench/verdict_simulation.py", *VERDICT]}
SUPERSEDED = {  # entries no benchmark makes any more -> why they are kept
    "thesis_grid": "superseded by `thesis` (bench/thesis.py no longer makes it): an oversubscribed scenario on 2 cores "
                   "that neither meets nor tests its goal, which names 16 cores; its reading is in the lab log"}


@dataclass
class History:
    """The repository's commits, read once when this module loads (the unit tests start no process): each one's
    parents, committer time and the files it changed."""
    commits: dict[str, tuple[list[str], int, list[str]]]

    @classmethod
    def read(cls, root: Path = ROOT) -> "History | None":
        """HEAD's history; None where it is not all here (no .git, no git, a shallow clone)."""
        if git("rev-parse", "--is-shallow-repository", root=root) != "false":
            return None
        text = git("log", "--format=%x00%H %P %ct", "--name-only", "HEAD", root=root)
        return None if text is None else cls.parse(text)

    @classmethod
    def parse(cls, text: str) -> "History":
        """`git log --format=%x00%H %P %ct --name-only` (a merge lists no files: its parents' commits do)."""
        commits = {}
        for chunk in filter(None, text.split("\0")):
            header, *files = chunk.strip().splitlines()
            sha, *parents, when = header.split()
            commits[sha] = (parents, int(when), [f for f in files if f])
        return cls(commits)

    def recorded_in(self, path: str, after_s: float) -> str | None:
        """The first commit at or after the time after_s that changed path: where a result measured then was saved."""
        found = [sha for sha, (_, when, files) in self.commits.items() if path in files and when >= after_s]
        return min(found, key=lambda sha: self.commits[sha][1], default=None)

    def changes(self, path: str, after: str | None = None, after_s: float | None = None) -> list[str]:
        """The commits that changed path, newest first: those HEAD has and commit `after` does not, or those committed
        after the time `after_s`."""
        seen, todo = set(), [after] if after else []
        while todo:
            sha = todo.pop()
            if sha not in seen and sha in self.commits:
                seen.add(sha)
                todo += self.commits[sha][0]
        found = [sha for sha, (_, when, files) in self.commits.items() if path in files and sha not in seen
                 and (after_s is None or when > after_s)]
        return sorted(found, key=lambda sha: -self.commits[sha][1])


HISTORY = History.read()


@dataclass
class Freshness:
    """Why an entry's figures are not the current code's: `label` stale, superseded or undecidable, and `why`."""
    label: str
    why: str


def freshness(entry: BenchResult, history: History | None = HISTORY) -> Freshness | None:
    """None where the entry was made by the code as it is. Stale: a file of its benchmark (PRODUCERS) changed in a
    commit that the entry's commit does not hold: the one it records or, for an entry that records none, the first
    commit that saved its file after its measured_at (UTC; a date alone: its midnight); for an entry not committed
    yet, a change after its measured_at. Undecidable where git cannot tell."""
    name, commit = entry.name, entry.commit
    if name in SUPERSEDED:
        return Freshness("superseded", SUPERSEDED[name])
    if name not in PRODUCERS:
        raise ValueError(f"bench/results/{name}.json: no benchmark named for it in PRODUCERS (docs/generate.py)")
    if history is None:
        return Freshness("undecidable", "no git history here to tell whether its benchmark changed since")
    if commit and commit["sha"] not in history.commits:
        return Freshness("undecidable", f"its commit {commit['sha'][:10]} is not in this history")
    measured_s = calendar.timegm(time.strptime(entry.measured_at[:10] + (entry.measured_at[10:] or " 00:00:00"),
                                               "%Y-%m-%d %H:%M:%S"))
    recorded = commit["sha"] if commit else history.recorded_in(f"bench/results/{name}.json", measured_s)
    since = {"after": recorded} if recorded else {"after_s": measured_s}
    for path in PRODUCERS[name]:
        if changes := history.changes(path, **since):
            day = time.strftime("%Y-%m-%d", time.gmtime(history.commits[changes[0]][1]))
            more = f", {len(changes)} changes since" if len(changes) > 1 else ""
            return Freshness("stale", f"measured at {entry.measured_at} ({commit_of(entry)}), before "
                                      f"`{path}` changed at {changes[0][:10]} ({day}{more}); rerun "
                                      f"`{rerun(name)}`")
    return None


def rerun(entry: str) -> str:
    """The command that measures a benchmark's entry again."""
    module = PRODUCERS[entry][0]
    name = entry if entry in BENCHMARKS else next(
        (n for n, spec in BENCHMARKS.items() if spec.split(":")[0] == module[:-3].replace("/", ".")), None)
    return f"python bench/run.py {name}" if name else f"python {module}"


def notice(entry: BenchResult) -> list[str]:
    """The line above an entry's figures where they are not the current code's."""
    if not (found := freshness(entry)):
        return []
    known = "not known to be" if found.label == "undecidable" else "not"
    return [f"**{found.label.capitalize()}**, {known} the current code's figures: {found.why}.", ""]


def hidden(entry: BenchResult, part: str = "") -> Freshness | None:
    """Why an entry's figures are not shown: not the current code's (stale, superseded), or measured before a fix its
    caveat names; None where they are shown (an undecidable one under its notice)."""
    found, said = freshness(entry), entry.body.get("caveat") or (entry.body.get("caveats") or {}).get(part) or ""
    if said.startswith("measured before") and not (found and found.label != "undecidable"):
        found = Freshness("measured before a fix", f"{said}; rerun `{rerun(entry.name)}`")
    return found if found and found.label != "undecidable" else None


def withheld(entry: BenchResult, part: str = "") -> str | None:
    """The one line shown instead of a hidden entry's figures."""
    found = hidden(entry, part)
    return f"**{found.label.capitalize()}**, figures not shown: {found.why}. It ran on " \
        f"{describe_machine(entry.machine)}." if found else None


def elapsed(entry: BenchResult, figure: str) -> str:
    """An elapsed time of the README's table, where and when it ran; a hidden entry's: the command to rerun."""
    found = hidden(entry)
    return f"— ({found.label}: rerun `{rerun(entry.name)}`)" if found else figure + briefly(entry)


# --- measured tables from bench/results/ -------------------------------------------------
def commit_of(entry: BenchResult) -> str:
    """The commit an entry ran at, as the pages say it."""
    commit = entry.commit
    return f"commit {commit['sha'][:10]}" + " with uncommitted changes" * commit["dirty"] if commit else \
        "commit not recorded"


def stamp(entry: BenchResult, part: str = "") -> str:
    """Where a table's figures come from: the entry (or one part of it), when, at which commit, on which machine."""
    return (f"*Measured {entry.measured_at} ({commit_of(entry)}) on {describe_machine(entry.machine)} "
            f"({source(entry.name, part)}).*")


def stamp_rows(entry: BenchResult, rows: list[dict]) -> str:
    """A table whose rows were measured at several times, possibly on several machines."""
    dates = sorted(r["measured_at"] for r in rows)
    machines = sorted({describe_machine(r["machine"]) for r in rows})
    return (f"*Measured {dates[0]} to {dates[-1]} ({commit_of(entry)}) on {'; '.join(machines)} "
            f"({source(entry.name)}, {len(rows)} rows).*")


def num(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def pct(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{100 * x:.{digits}f} %"


def times(x: float | None, interval: Sequence[float] | None = None, digits: int = 2) -> str:
    """A ratio with its 95 % interval: 0.97× [0.88, 1.06]."""
    if x is None:
        return "–"
    return f"{x:.{digits}f}×" + (f" [{interval[0]:.{digits}f}, {interval[1]:.{digits}f}]" if interval else "")


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def caveat(body: dict, part: str = "") -> list[str]:
    """An entry's caveat, or its part's (a known defect of how it was measured), for above its tables."""
    found = body.get("caveat") or (body.get("caveats") or {}).get(part)
    return [f"**Caveat:** {found}", ""] if found else []


GOAL_MET = {True: "met", False: "**missed**", None: "–"}  # an entry's goal_met; –: not recorded (or no goal)


def ratio_cell(body: dict) -> str:
    """An entry's ratio, with its 95 % interval and pairs where it records them."""
    low, high = body.get("interval") or (None, None)
    if low is None or high is None:
        return num(body.get("ratio"), 3)
    pairs = f", {body['pairs']} pairs" if "pairs" in body else ""
    return times(body["ratio"], (low, high), 3) + pairs


def bench_summary() -> str:
    """Every benchmark's latest ratio beside its goal, date, commit and machine; a caveat marked with its entry, an
    entry not made by the current code marked instead of its ratio and goal's verdict (a superseded one only listed)."""
    names = load_all()
    entries = [e for e in names.values() if e.name not in SUPERSEDED]
    found = {e.name: hidden(e) or freshness(e) for e in entries}
    rows = [[f"`{e.name}`" + (" (caveat)" if e.body.get("caveat") or e.body.get("caveats") else ""),
             "not shown" if hidden(e) else ratio_cell(e.body), cell(e.goal), goal_cell(e, found[e.name]),
             f"{e.measured_at} ({commit_of(e)})", describe_machine(e.machine)] for e in entries]
    notes = [f"- `{e.name}`: {e.body['caveat']}" for e in entries if e.body.get("caveat")]
    notes += [f"- `{e.name}` → `{part}`: {text}" for e in entries
              for part, text in (e.body.get("caveats") or {}).items()]
    stale = [f"- `{name}`: {why.why}." for name, why in found.items() if why]
    return "\n".join(table(["benchmark", "ratio", "goal", "goal met", "measured", "machine"], rows)
                     + (["", "Not the current code's (the goal's verdict left out, and the ratio unless undecidable):",
                         *stale] if stale else [])
                     + (["", "Caveats:", *notes] if notes else [])
                     + [f"\nNot shown: `{name}`, {why}." for name, why in SUPERSEDED.items() if name in names])


def goal_cell(entry: BenchResult, found: Freshness | None) -> str:
    """Whether an entry met its goal, where it is the current code's; else why not (stale, superseded, undecidable)."""
    return f"**{found.label}**" if found else GOAL_MET[entry.goal_met]


def bench_machines() -> str:
    """The machines bench/results names, with the entries (and rows) measured on each."""
    found: dict[str, list[str]] = {}

    def visit(value: Any, name: str) -> None:
        if isinstance(value, dict) and isinstance(value.get("machine"), dict):
            found.setdefault(describe_machine(value["machine"]), []).append(name)
        for item in value.values() if isinstance(value, dict) else value if isinstance(value, list) else []:
            visit(item, name)

    for name, entry in load_all().items():
        visit(entry.json(), name)
    rows = [[machine, ", ".join(f"`{n}`" + (f" ({names.count(n)})" if names.count(n) > 1 else "")
                                for n in dict.fromkeys(names))] for machine, names in sorted(found.items())]
    return "\n".join(table(["machine", "entries (how many of their rows and parts)"], rows))


def verdict() -> str:
    """The headline's latest recorded sweep (bench/headline.py), its wall time and whether it replicates."""
    entry = load_all()["headline"]
    last = len(entry.body["answers"]) - 1
    sweep = entry.body["answers"][last]
    if line := withheld(entry):
        return line
    return "\n".join([*notice(entry), stamp(replace(entry, measured_at=sweep["measured_at"], machine=sweep["machine"]),
                                             f"answers.{last}"), "", *answer_lines(sweep), "",
                      wall_time_line(entry.body), "", design_line(entry.body), "", replication_line(entry.body)])


def quick_verdict() -> str:
    """The quick comparison's verdict as typed, its one recorded sweep (bench/quick.py)."""
    entry = load_all()["quick"]
    if line := withheld(entry, "answer"):
        return line
    return "\n".join([*notice(entry), stamp(entry, "answer"), "", *answer_lines(entry.body["answer"])])


def answer_lines(sweep: dict) -> list[str]:
    """One recorded sweep's verdict (bench/headline.py figures_of): figure, comparisons, answer, links, wall time."""
    claim = "withheld ({})" if sweep["claims_withheld"] else "**{}**"  # the verdict refused its claims: Answer
    body = [[f"{c['this']} vs {c['other']}", times(c["ratio"], c["interval_95"]), claim.format(c["claim"]),
             num(c["adjusted_p"], 3), f"{c['blocks']} ({c['censored']} censored)"] for c in sweep["comparisons"]]
    return [f"{sweep['primary']}", ""] + table(
        ["comparison", "ratio, 95 % interval", "claim", "Holm-adjusted p", "blocks"], body) + [
        "", f"Answer: {sweep['answer'].removeprefix('Answer: ')}", "", *[f"- {line}" for line in sweep["links"]], "",
        f"{sweep['runs']} runs, {sweep['wall_s'] / 60:.0f} min ({sweep['wall_method']})."]


def wall_time_line(entry: dict) -> str:
    """The longest recorded sweep against the same headline on loopback, as bench/headline.py measured it."""
    loopback = entry.get("loopback")
    if not loopback:
        return "Wall time against the headline on loopback: not measured on this machine."
    longest = max(a["wall_s"] for a in entry["answers"])
    return (f"Wall time: the longest recorded sweep, {longest / 60:.0f} min, is {entry['ratio']:.2f}× the same "
            f"headline on loopback (`network=loopback`: {loopback['wall_s'] / 60:.0f} min, {loopback['method']}, "
            f"{loopback['measured_at']}; goal at most {WALL_TIME_GOAL}×).")


def design_line(entry: dict) -> str:
    """The headline, whose runs end at the target, against the fixed-horizon design (bench/headline.py): each pair
    of sweeps, then the blocks over all pairs."""
    found = entry.get("fixed_design")
    if not found:
        return "Against the fixed-horizon design (`eval_in_training=false`): not measured on this machine."
    lines = ["Runs that end at the target, against the fixed-horizon design (`eval_in_training=false`, every run "
             "to `max_steps`), each pair measured alone."] + [pair_line(pair) for pair in found["pairs"]]
    if len(found["pairs"]) > 1 or found["block_interval_95"]:
        lines.append(f"Per block (the sum of its runs' wall clocks, headline / fixed, {found['blocks']} blocks over "
                     f"{len(found['pairs'])} pairs): geometric mean "
                     f"{times(found['block_ratio'], found['block_interval_95'])}.")
    lines.append(f"Goal: at most {DESIGN_GOAL}× and every decision kept, in every pair: "
                 f"**{'met' if found['goal_met'] else 'missed'}**.")
    return " ".join(lines)


def pair_line(pair: dict) -> str:
    """One headline sweep against the fixed-horizon sweep measured beside it."""
    fixed, otherwise = pair["sweep"], pair["decided_otherwise"]
    decided = (f"each of the {pair['decided']} comparisons it decides decided alike" if not otherwise else
               f"decided otherwise: {'; '.join(otherwise)}")
    apart = ("measured one after the other" if pair["one_after_the_other"] else
             f"measured {pair['apart_s'] / 3600:.1f} h apart, not one after the other")
    return (f"The sweep {pair['headline_folder']} took **{pair['ratio']:.2f}×** the fixed design's elapsed time "
            f"({fixed['wall_s'] / 60:.0f} min, {fixed['wall_method']}, ended {fixed['measured_at']}, {apart}); "
            f"{decided} ({'met' if pair['goal_met'] else 'missed'}).")


def replication_line(entry: dict) -> str:
    """Whether the latest sweep gives the answer of the one before it (bench/headline.py's rule)."""
    found = entry.get("replication")
    if found is None:
        return "Replication: not yet checked (one sweep recorded on this machine)."
    earlier = entry["answers"][0]
    reasons = ([] if found["same_ranking"] else ["another ranking"]) + [
        f"contradicting claims: {'; '.join(found['contradictions'])}"] * bool(found["contradictions"]) + [
        "a verdict that withheld its claims"] * found["claims_withheld"] + [
        f"{len(found['separated_averaging_pairs'])} pairs of averaging configurations separated in both (at least 2 "
        "needed)"] * (len(found["separated_averaging_pairs"]) < 2)
    pairs = "; ".join(found["separated_averaging_pairs"]) or "none"
    said = "**replicates**" if found["replicates"] else f"**does not replicate** ({', '.join(reasons)})"
    return (f"Replication against the sweep measured {earlier['measured_at']} on the same machine: {said}; "
            f"separated in both: {pairs}.")


def region(entry: dict, strategy: str) -> str:
    """A strategy's validated region, as the projection reads it from this entry ("none" where it has none)."""
    found = validations(entry, "projection_validation").get(strategy)
    return found.region_text if found and not found.failed and found.checked else "none"


TEMPLATE_DIR = ROOT / "docs" / "templates"  # NAME.md.j2: the table `generated:bench NAME [PART]`
SOURCE = {"projection_goals": "projection_validation", "projection_verdicts": "projection_validation",
          "thesis_projected": "thesis"}  # tables of another entry


def fail(message: str) -> NoReturn:
    raise ValueError(message)


TEMPLATES = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE_DIR), trim_blocks=True,
                               lstrip_blocks=True, undefined=jinja2.StrictUndefined)
TEMPLATES.globals |= {"stamp": stamp, "stamp_rows": stamp_rows, "num": num, "pct": pct, "times": times,
                      "nums": lambda values, digits=2: ", ".join(num(v, digits) for v in values),
                      "by_number": lambda keys: sorted(set(keys), key=float), "machine": describe_machine,
                      "source": source, "log_sd": log_sd, "fail": fail,
                      "index": lambda rows, key: {r[key]: r for r in rows},
                      "tally": lambda values: Counter(values).items(), "region": region}
TEMPLATES.filters["fmt"] = format
TEMPLATES.tests |= {"containing": lambda text, part: part in text,
                    "checked_for_fidelity": lambda row: row.get("counted") or row.get("faithful") is False}


def bench(name: str, *args: str) -> str:
    """A measured table: whether it is the current code's (notice), its entry's caveat, then the template
    TEMPLATE_DIR/NAME.md.j2 (args[0]: its part); a hidden entry's: one line why (withheld)."""
    known = sorted(p.name.removesuffix(".md.j2") for p in TEMPLATE_DIR.glob("*.md.j2"))
    if name not in known:
        raise ValueError(f"bench {name}: unknown table (known: {', '.join(known)})")
    entry = load_all()[SOURCE.get(name, name)]
    part = args[0] if args else ""
    body = TEMPLATES.get_template(f"{name}.md.j2").render(entry=entry.json(), result=entry, part=part)  # checks part
    if line := withheld(entry, part):
        return line
    return "\n".join(notice(entry) + caveat(entry.body, part) + body.rstrip("\n").split("\n"))


def simulated_power(entries: dict[str, BenchResult], blocks: int, effect: float) -> str:
    """The power the verdict itself has at the smallest effect and these blocks, by its simulation (none: '')."""
    entry = entries.get("verdict_simulation")
    simulation = entry.body if entry and not hidden(entry) else {}
    cells = [c for c in simulation.get("cells", []) if c["blocks"] == blocks and c["scenario"] == f"effect x{effect:g}"]
    found = [c["power"].get(f"x{effect:g}") for c in cells]
    if not found or None in found:
        return ""
    return (f"; the verdict's own power at ×/÷{effect:g} by simulation (`verdict_simulation`, "
            f"{', '.join(c['noise'] for c in cells)} noise of paired log-sd "
            f"{simulation['fit']['paired_log_sd']:.3f}, as fitted when it ran): "
            f"{' and '.join(pct(p, 0) for p in found)}")


def noise_machines(noise: PlanningNoise) -> str:
    """Whose noise the headline's row plans from: the sweeps' machine's, or (planning_noise) the conservative prior
    from other machines' rows."""
    if noise.basis == OWN_MACHINE:
        return "measured on the sweeps' machine"
    others = sorted({f"{describe_machine(r['machine'])}, {r['measured_at'][:10]}" for r in noise.rows})
    return f"not measured on the sweeps' machine: {BASIS[noise.basis]}, from {'; '.join(others)}"


DETAIL = "docs/usage.md#what-each-command-answers"  # where the README's short cells are spelt out


@dataclass
class Command:
    """A row of the README's table: each cell a short phrase; the long text, for docs/usage.md."""
    command: str
    answers: str
    elapsed: str
    decides: str
    answers_detail: str
    elapsed_detail: str
    decides_detail: str


def command_rows() -> tuple[list[Command], list[str]]:
    """Each command, what it answers, its measured time and what its blocks decide; the entries not current."""
    entries = load_all()
    share, headline = entries["evaluation_share"], entries["headline"]
    runs = " and ".join(num(r["command_s"] / 60, 1) for r in share.body["repeats"])
    sweeps = " and ".join(f"{a['wall_s'] / 60:.0f}" for a in headline.body["answers"])
    config = yaml.safe_load((ROOT / "conf" / "config.yaml").read_text())
    blocks, family, strategies = int(config["repeats"]), 6, ["ps", "ring", "stepwise"]
    primary = Primary("time_to_target", *(config["target"][k] for k in ("metric", "value", "estimator")))
    noise = planning_noise(EVIDENCE, primary, "digits", "resnet18", strategies, headline.machine)
    sd, df = noise.log_sd, noise.df
    upper = noise.bound
    effect = float(config["report"]["smallest_effect"])
    decides = (f"{blocks} blocks: ratios beyond ×/÷{detectable(sd, blocks, family):.2f} at 80 % power after Holm over "
               f"{family} comparisons (×/÷{detectable(upper, blocks, family):.2f} at the bound repeats=auto plans "
               "on); "
               f"power at ×/÷{effect:g} (`report.smallest_effect`): {pct(power(sd, blocks, effect, family), 0)} "
               f"({pct(power(upper, blocks, effect, family), 0)} at the bound). Noise: pooled paired log-sd "
               f"{sd:.3f} on {df} df (`primary_noise`, estimator {primary.estimator}; "
               f"{noise_machines(noise)})"
               + simulated_power(entries, blocks, effect))
    if (samples := headline.body.get("samples")) and not hidden(headline):
        decides += f"; the latest sweep's report: [Markdown]({samples[0]}), [HTML]({samples[1]})"
    short = f"ratios beyond ×/÷{detectable(sd, blocks, family):.2f} in {blocks} blocks"
    if (noisy := entries.get("primary_noise")) and hidden(noisy):  # the noise it plans on
        short, decides = elapsed(noisy, ""), str(withheld(noisy))
    hivemind = entries.get("hivemind_command")
    rows = [Command("`make run`", "one ResNet18 run on the digits data, to the target", elapsed(share, f"{runs} min"),
                    "one run: no comparison",
                    "sets up, then trains ResNet18 on the digits data in one process, to the target",
                    withheld(share) or f"{runs} min ({measured(share)})", "one run: no comparison"),
            Command("`.venv/bin/python train.py -m strategy=ring,stepwise,ps`",
                    "which averaging reaches 95 % accuracy faster than one process, and than each other",
                    elapsed(headline, f"{sweeps} min a sweep"), short,
                    "which averaging reaches 95 % test accuracy faster than one process on the same CPUs, and than "
                    "each other, on emulated per-host links",
                    withheld(headline) or f"{sweeps} min, one sweep each ({measured(headline)})",
                    decides),
            Command("`.venv/bin/python train.py strategy=hivemind peers=8`",
                    "how 8 hivemind peers train and what their averaging costs",
                    elapsed(hivemind, f"{num(hivemind.body['repeats'][0]['command_s'] / 60, 1)} min") if hivemind
                    else "not recorded", "one run: no comparison",
                    "how 8 hivemind peers train, round by round, and what their averaging costs",
                    hivemind_elapsed(hivemind), "one run: no comparison"),
            quick_row(entries.get("quick"))]
    shown = (share, headline, hivemind, entries.get("quick"), entries.get("primary_noise"),
             entries.get("verdict_simulation"))  # the last two: the headline's noise and power
    return rows, [f"- `{e.name}`: {found.why}." for e in shown if e and (found := freshness(e))]


def commands() -> str:
    """The README's first screen: each command, what it answers, its measured time and what its blocks decide, a
    short phrase each, linked to their detail (command_details)."""
    rows, _ = command_rows()
    return "\n".join(table(["command", "what it answers", "elapsed", "what its blocks can decide"],
                            [[r.command, f"{r.answers} ([detail]({DETAIL}))", r.elapsed, r.decides] for r in rows]))


def command_details() -> str:
    """The README's table spelt out (docs/usage.md): where and when each figure was measured, what the blocks
    decide and on which noise."""
    rows, not_current = command_rows()
    lines = [line for r in rows for line in (
        f"- {r.command}: {r.answers_detail}.", f"  - Elapsed, measured: {r.elapsed_detail.removesuffix('.')}.",
        f"  - What its blocks can decide: {r.decides_detail.removesuffix('.')}.")]
    lines += ["", "Not the current code's figures:", *not_current] if not_current else []
    return "\n".join(lines).replace("](docs/", "](")  # links as seen from docs/


def briefly(entry: BenchResult | None) -> str:
    """Where and when an entry of the README's table was measured, in brief; "stale" where it is not the current
    code's figure."""
    if not entry:
        return ""
    m = entry.machine
    where = f"{m.get('cpu_model_name', 'CPU')} {m.get('cpu_family', '?')}/{m.get('cpu_model', '?')}"
    return f" ({where}, {entry.measured_at[:10]}{'; stale' if freshness(entry) else ''})"


def measured(entry: BenchResult) -> str:
    """When and where an entry of the table above was measured, marked where it is not the current code's."""
    found = freshness(entry)
    return f"{entry.measured_at}, {describe_machine(entry.machine)}" + (f"; **{found.label}**" if found else "")


def hivemind_elapsed(entry: BenchResult | None) -> str:
    """The hivemind command's measured minutes (bench/hivemind_command.py), with what its runs reached and held."""
    if not entry:
        return "not recorded (`python bench/hivemind_command.py`)"
    if line := withheld(entry):
        return line
    runs = entry.body["repeats"]
    first = runs[0]
    reached = " and ".join("reached the target" if r["time_to_target_s"] is not None
                           else f"worst worker {r['worst_accuracy']:.3f}, target not reached" for r in runs)
    held = " and ".join("its CPUs and links held" if not r["unfaithful"] else "unfaithful" for r in runs)
    return (f"{' and '.join(num(r['command_s'] / 60, 1) for r in runs)} min, {len(runs)} run{'s' * (len(runs) > 1)} "
            f"({reached}; 8 peers oversubscribed {first['oversubscription']:.2g}x on {first['cores']} cores: {held}; "
            f"{measured(entry)})")


def quick_row(entry: BenchResult | None) -> Command:
    """The quick comparison's row (bench/quick.py): its wall clock and the ratio its blocks detect."""
    command = "`.venv/bin/python train.py -m experiment=quick strategy=allreduce,stepwise,ps`"
    answers = "the first command's question on a tiny CNN, in minutes"
    answers_detail = ("the first command's question on the tiny CNN, 200 steps a run, 8 blocks: allreduce, stepwise "
                      "and ps against one process on the same CPUs, and against each other")
    if not entry:
        return Command(command, answers, "not recorded", "–", answers_detail,
                       "not recorded (`python bench/run.py quick`)", "–")
    if line := withheld(entry):
        return Command(command, answers, elapsed(entry, ""), "–", answers_detail, line, "–")
    answer, noise = entry.body["answer"], entry.body["answer"]["noise"]
    measured_noise = noise and noise["log_sd"]
    decides = "no noise measured" if not measured_noise else (
        f"{noise['blocks']} blocks: ratios beyond ×/÷{noise['detectable']:.2f} at 80 % power after Holm over "
        f"{noise['family']} comparisons, on the noise this sweep measured (paired log-sd {noise['log_sd']:.3f}); "
        f"its report: [Markdown]({entry.body['samples'][0]}), [HTML]({entry.body['samples'][1]})")
    return Command(command, answers, f"{answer['wall_s'] / 60:.1f} min{briefly(entry)}",
                   f"ratios beyond ×/÷{noise['detectable']:.2f} in {noise['blocks']} blocks" if measured_noise
                   else "no noise measured", answers_detail,
                   f"{answer['wall_s'] / 60:.1f} min, one sweep (goal ≤ {entry.body['goal_s'] / 60:.0f} min: "
                   f"{'met' if entry.goal_met else 'missed'}; {measured(entry)})", decides)


GENERATORS: dict[str, Callable[..., str]] = {
    "commands": commands, "command-details": command_details,
    "knobs": knobs, "groups": groups, "bench": bench, "bench-summary": bench_summary,
    "bench-machines": bench_machines, "verdict": verdict, "quick-verdict": quick_verdict}


# --- blocks -----------------------------------------------------------------------------
def render(spec: str) -> str:
    name, *args = spec.split()
    if name not in GENERATORS:
        raise ValueError(f"generated:{spec}: unknown generator {name!r} (known: {', '.join(GENERATORS)})")
    return GENERATORS[name](*args)


def regenerated(text: str, page: Path) -> str:
    """The page with every generated block rewritten; a malformed block is an error naming the page."""
    blocks = list(BLOCK.finditer(text))
    markers = len(OPEN.findall(text))
    if markers != 2 * len(blocks):
        raise ValueError(f"{page.name}: {markers} generated markers for {len(blocks)} complete blocks "
                         "(each `<!-- generated:SPEC -->` needs its `<!-- end generated:SPEC -->`)")
    for block in blocks:
        if block["spec"] != block["end"]:
            raise ValueError(f"{page.name}: block generated:{block['spec']} ends as generated:{block['end']}")
    return BLOCK.sub(lambda block: f"<!-- generated:{block['spec']} -->\n{render(block['spec'])}\n"
                     f"<!-- end generated:{block['spec']} -->", text)


def stale_pages(pages: list[Path] = PAGES) -> dict[Path, str]:
    """Page -> its text as generated, for every page whose generated blocks differ from what is on disk."""
    texts = {page: page.read_text() for page in pages}
    fresh = {page: regenerated(text, page) for page, text in texts.items()}
    return {page: text for page, text in fresh.items() if text != texts[page]}


def screenshots(samples: Path = ROOT / "docs" / "samples") -> list[Path]:
    """The first screen (1280×800) of each sample report in headless Chromium, NAME.png beside NAME.html; none
    without Chromium (scripts/setup.sh installs it)."""
    if not (chromium := shutil.which("chromium")):
        print("no chromium on PATH: the sample reports' screenshots are not taken", file=sys.stderr)
        return []
    shots = []
    for page in sorted(samples.glob("*.html")):
        with tempfile.TemporaryDirectory() as profile:
            subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                            "--disable-component-update", "--disable-sync", "--no-first-run",
                            f"--user-data-dir={profile}", f"--screenshot={page.with_suffix('.png')}",
                            "--window-size=1280,800", page.as_uri()], capture_output=True, timeout=120, check=True)
        shots.append(page.with_suffix(".png"))
    return shots


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a generated block is stale")
    args = parser.parse_args(argv)
    stale = stale_pages()
    for page, fresh in stale.items():
        if args.check:
            print(f"stale: {page.relative_to(ROOT)} (run `make docs`)", file=sys.stderr)
        else:
            page.write_text(fresh)
            print(f"rewrote {page.relative_to(ROOT)}")
    if not args.check:
        for shot in screenshots():
            print(f"screenshot {shot.relative_to(ROOT)}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
