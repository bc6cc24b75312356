"""The runs a report covers, grouped: repeats of one configuration (a Group) differ only in `seed` and `block`; groups
on the same (dataset, model) form a Section. Attempts a resumed sweep moved below `superseded/` stay attempts."""
import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from metrics.recording.jsonl import read_jsonl
from metrics.recording.rundir import SUPERSEDED, SWEEP_PLAN, RunDir, run_dirs_under, started_runs_under
from metrics.summary.build import NO_SUMMARY
from metrics.summary.fidelity import unfaithful
from metrics.summary.schema import Json, Link, Peer, SpeedReference, Summary, holds
from metrics.report.formats import counted, share
from metrics.report.stats import Ratio

NOT_CONFIGURATION = ("seed", "block", "plan", "repeats", "progress", "progress_interval_s", "report.", "lock",
                     "launch.node_rank", "launch.master_addr")  # repeats of one configuration differ only in these
REQUIRED_CONFIG = ("strategy.name", "data.name", "model.name", "peers", "peer_cpus", "batch_size", "lr")
FAULT_KINDS = ("kill_peer", "raise_peer", "stall_peer")
CONF_DIR = Path(__file__).resolve().parent.parent.parent / "conf"
NOT_A_LABEL = ("strategy.", "peers", "peer_cpus", "fault.", "arm", "launch.",
               *NOT_CONFIGURATION)  # named otherwise, or no knob (launch.nnodes: "on N nodes")
CONTROL = "control"  # config `arm` of the control arm: the equal-resource baseline's second run in a block
PLANNED = "planned"


def strategy_blocks(*runs: "Run") -> tuple[str, ...]:
    """The knob blocks (NAME.: a strategy's own knobs) of conf/strategy/'s strategies and of these runs' own."""
    names = {p.stem for p in (CONF_DIR / "strategy").glob("*.yaml")} | {run.strategy for run in runs}
    return tuple(f"{name}." for name in sorted(names))


@dataclass
class PeerLogs:
    rank: int
    steps: list[Json]
    evals: list[Json]
    resources: list[Json]


@dataclass(eq=False)  # runs and groups are compared by identity
class Run:
    path: Path
    summary: Summary
    peers: list[PeerLogs]
    speedup: float | None = None  # throughput / the equal-resource baseline's in the same block (attach_baselines)
    scaling_efficiency: float | None = None  # throughput / (peers x the one-peer baseline's in the same block)
    superseded: bool = False  # an attempt the sweep moved aside (below superseded/)
    run_later: bool = False   # run again after an earlier attempt of its block (the sweep's plan says so)
    counted: bool = True      # in the comparisons: a block's first attempt is, the attempts after it are not

    @property
    def attempt(self) -> str:
        """Where the run stands among its block's attempts (runs.csv, the Failures table)."""
        where = "superseded" if self.superseded else "run later" if self.run_later else "current"
        return where if self.counted else f"{where}, not counted"

    @property
    def config(self) -> Json:
        return self.summary.config

    @property
    def strategy(self) -> str:
        return self.config["strategy"]["name"]

    @property
    def knobs(self) -> Json:
        return self.summary.strategy_knobs or {}

    @property
    def total_cpus(self) -> int:
        return self.config["peers"] * self.config["peer_cpus"]

    @property
    def dataset(self) -> tuple[str, str]:
        """(data, model) the run trained; a custom model is named by its model.target (model=custom)."""
        model = self.config["model"]
        return self.config["data"]["name"], model.get("target") or model["name"]

    @property
    def completed(self) -> bool:
        return self.summary.status == "completed"

    @property
    def planned(self) -> bool:
        """A run a sweep is about to start (launchers.sweeper plans its baselines with these)."""
        return self.summary.status == PLANNED

    @property
    def is_control(self) -> bool:
        return self.config.get("arm") == CONTROL

    @property
    def sweep(self) -> Path | None:
        """The multirun directory holding this run (the nearest parent with a sweep plan)."""
        return next((p for p in self.path.parents if (p / SWEEP_PLAN).exists()), None)

    @property
    def block(self) -> tuple[str | None, int | None]:
        """(plan, block): config `plan` (pooled across sweep folders), else the sweep's folder, never a bare block index
        (pooled across sweeps); (None, None) outside blocks."""
        block = self.config.get("block")
        if block is None:
            return None, None
        if self.config.get("plan"):
            return f"plan {self.config['plan']}", block
        return str(self.sweep or self.path.parent.parent), block  # no plan file: the folder above block<B>/ (its sweep)

    @property
    def is_baseline(self) -> bool:
        """A single-process run others are compared with (summary.json's is_baseline, its strategy says so)."""
        return bool(self.summary.is_baseline)

    @property
    def shape(self) -> tuple[int, int]:
        return self.config["peers"], self.config["peer_cpus"]

    @property
    def reference(self) -> PeerLogs | None:
        """The lowest-rank peer that trained."""
        return next((p for p in self.peers if p.steps), None)

    @property
    def workers(self) -> list[PeerLogs]:
        """Peers that trained (parameter servers do not)."""
        return [p for p in self.peers if p.steps]

    def unfaithful(self) -> list[str]:
        return unfaithful(self.summary)

    @property
    def speed_reference(self) -> SpeedReference:
        return self.summary.speed_reference

    def speed_moved(self) -> str | None:
        """A mark where the run's speed reference moved beyond its tolerance (never a reason to leave the run out)."""
        reference = self.speed_reference
        if not reference.beyond_tolerance:
            return None
        return (f"machine speed moved {share(reference.moved)} during the run (speed reference: its highest level held "
                f"for two measurements in a row less its lowest / median, tolerance {share(reference.tolerance)})")

    def slower_than_block(self, runs: list["Run"]) -> float | None:
        """This run's speed reference / the median of its block's among `runs` (the same work) - 1: > 0 slower; None
        outside a block or without references."""
        mine = self.speed_reference
        if self.block[1] is None or not mine.median_s:
            return None
        block = [r.speed_reference.median_s for r in runs if r.block == self.block
                 and r.speed_reference.median_s and r.speed_reference.work == mine.work]
        return mine.median_s / statistics.median(block) - 1 if len(block) > 1 else None

    @property
    def link(self) -> Link:
        return self.summary.link

    def worst_worker_accuracy(self) -> float | None:
        """The lowest final test accuracy over workers: accuracy_by_worker.worst, else each worker's last evaluation."""
        worst = self.summary.accuracy_by_worker.worst
        if worst is not None:
            return worst
        finals = [a for p in self.peers if p.evals and (a := p.evals[-1].get("test_accuracy")) is not None]
        return min(finals) if finals else None

    def peer_summaries(self) -> list[Peer]:
        return self.summary.peers or []

    def strategy_figures(self) -> dict[str, float | str]:
        """peers[*].result.strategy flattened and merged: numbers as their mean over peers, others as a distinct set."""
        values: dict[str, list[Any]] = {}
        for peer in self.peer_summaries():
            for key, value in flatten((peer.result or {}).get("strategy") or {}).items():
                values.setdefault(key, []).append(value)
        merged: dict[str, float | str] = {}
        for key, vals in values.items():
            numbers = [v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
            if numbers and len(numbers) == len(vals):
                merged[key] = statistics.fmean(numbers)
            else:
                merged[key] = ", ".join(sorted({json.dumps(v) if not isinstance(v, str) else v for v in vals}))
        return merged

    @property
    def nnodes(self) -> int:
        """The hosts the run spread over (launch.nnodes; metrics/report/nodes.py reads their folders as one run)."""
        return int((self.config.get("launch") or {}).get("nnodes") or 1)

    @property
    def hosts(self) -> list[str]:
        """The hosts it ran on (summary.json's shape: its host, or its nodes' hosts)."""
        shape = self.summary.shape
        return [host for host in shape.hosts or [shape.host] if host]

    def errors(self) -> list[str]:
        """The run's error, its nodes' (a run over several) and its peers' own tracebacks, each once."""
        texts = [self.summary.error, *(n.error for n in self.summary.nodes or []),
                 *(p.error for p in self.peer_summaries())]
        return list(dict.fromkeys(t.strip() for t in texts if t and t.strip()))


def planned_run(config: Json, is_baseline: bool) -> Run:
    return Run(Path(), Summary(status=PLANNED, config=config, is_baseline=is_baseline), [])


def read_plan(sweep: Path | str | None) -> Json:
    """A multirun's plan (launchers/sweeper.py), or {} where there is none."""
    if sweep is None:
        return {}
    try:
        return json.loads((Path(sweep) / SWEEP_PLAN).read_text())
    except (OSError, ValueError):
        return {}


def training_s(summary: Summary) -> float:
    """The run's training time to its target, or to its horizon (all it trained) where it has none, in the seconds it
    spent: a dilated run's summary holds the emulated cluster's time (isolation.py undilate), x its dilation here."""
    trained = summary.time_to_target_s
    if trained is None:
        trained = max((p.train_s or 0.0 for p in summary.peers), default=0.0)
    return trained * (summary.isolation.dilation or 1)


def sweep_efficiency(runs: list[Run]) -> tuple[float, float] | None:
    """(sweep efficiency, elapsed s) over the runs of the sweeps that recorded their elapsed time, None where none did
    (methods.yaml report: sweep efficiency)."""
    elapsed = {sweep: seconds for sweep in dict.fromkeys(r.sweep for r in runs) if sweep is not None
               if (seconds := sum(e["ended_at"] - e["started_at"] for e in read_plan(sweep).get("elapsed") or []))}
    if not elapsed:
        return None
    elapsed_s = sum(elapsed.values())
    return sum(training_s(r.summary) for r in runs if r.sweep in elapsed) / elapsed_s, elapsed_s


def find_runs(dirs: list[Path]) -> tuple[list[Path], list[Path]]:
    """Folders under dirs holding a run (its summary.json, or the config of a run started without one), and those of
    the attempts moved aside (below `superseded`)."""
    runs, superseded = set[Path](), set[Path]()
    for top in dirs:
        for path in [*run_dirs_under(top), *started_runs_under(top)]:
            (superseded if SUPERSEDED in path.relative_to(top).parts else runs).add(path)
    return sorted(runs), sorted(superseded)


def peer_logs(folder: Path) -> list[PeerLogs]:
    return [PeerLogs(d.rank, read_jsonl(d.steps), read_jsonl(d.evals), read_jsonl(d.resources))
            for d in RunDir(folder).peers()]


def load_run(path: Path) -> Run:
    summary = Summary.load(RunDir(path).summary, require=tuple(f"config.{key}" for key in REQUIRED_CONFIG))
    return Run(path, summary, peer_logs(path))


def load_unsummarised(path: Path, folders: list[Path]) -> Run:
    """A run started without a summary (its launcher was stopped): a failed run of the config it recorded, with its
    peers' logs (its horizon); ValueError where that config lacks what the report reads."""
    config = yaml.safe_load(RunDir(folders[0]).config.read_text())
    missing = [key for key in REQUIRED_CONFIG if not holds(config, key.split("."))]
    if missing:
        raise ValueError(f"its config has no {', '.join(missing)}")
    baseline = config["strategy"]["name"] == (config.get("report") or {}).get("baseline_strategy")
    summary = Summary(status="failed", error=NO_SUMMARY, config=config, is_baseline=baseline)
    return Run(path, summary, [logs for folder in folders for logs in peer_logs(folder)])


def flatten(config: Json, prefix: str = "") -> Json:
    """{"data": {"name": "digits"}} -> {"data.name": "digits"}."""
    flat: Json = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat |= flatten(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


Block = tuple[str | None, int | None]  # Run.block
RunFigure = Callable[[Run], float | None]  # a figure of a run, None where it has none


@dataclass(eq=False)
class Group:
    """Runs of one configuration (repeats differ only in seed)."""
    runs: list[Run]
    label: str = ""
    family: str = ""  # the label without the resource shape: one line in a throughput-vs-peers plot
    color: str = "C0"
    baseline: "Group | None" = None  # the equal-resource single-process group, set by attach_baselines
    one_peer: "Group | None" = None  # the single-process group with one peer of the same CPUs (scaling efficiency)
    control: "Group | None" = None   # this baseline's control arm: its second run in every block
    speedup: Ratio | None = None     # throughput / the baseline's, paired by block (attach_baselines)
    efficiency: Ratio | None = None  # throughput / (peers x the one-peer baseline's), paired by block
    accuracy_change: list[float] | None = None  # worst worker's final accuracy - the baseline's, one per block
    attempts: list[Run] = field(default_factory=list)  # runs of this configuration not counted: later attempts

    @property
    def first(self) -> Run:
        return self.runs[0]

    @property
    def is_control(self) -> bool:
        return self.first.is_control

    def values(self, figure: RunFigure) -> list[float]:
        """figure(run) for each run, Nones dropped."""
        return [v for v in (figure(r) for r in self.runs) if v is not None]

    def mean(self, figure: RunFigure) -> float | None:
        values = self.values(figure)
        return statistics.fmean(values) if values else None

    def seeds(self) -> list[Any]:
        return [r.config.get("seed") for r in self.runs]

    def median_phases(self) -> dict[str, float]:
        """Phase -> the median of its seconds over the runs that recorded wall_phases_s ({}: none did)."""
        recorded = [r.summary.wall_phases_s.seconds() for r in self.runs if r.summary.wall_phases_s]
        return {phase: statistics.median(r[phase] for r in recorded) for phase in recorded[0]} if recorded else {}

    def by_block(self, figure: RunFigure) -> dict[Block, float]:
        """block -> the geometric mean of figure(run) over this group's runs in that block (Nones dropped)."""
        found = {b: [v for r in runs if (v := figure(r)) is not None and v > 0] for b, runs in block_runs(self).items()}
        return {block: statistics.geometric_mean(values) for block, values in found.items() if values}


def block_runs(group: Group) -> dict[Block, list[Run]]:
    found: dict[Block, list[Run]] = {}
    for run in group.runs:
        found.setdefault(run.block, []).append(run)
    return found


def block_means(group: Group, figure: RunFigure) -> dict[Block, float]:
    """block -> the mean of figure(run) over the group's runs in that block (Nones dropped)."""
    found = {b: [v for r in runs if (v := figure(r)) is not None] for b, runs in block_runs(group).items()}
    return {block: statistics.fmean(values) for block, values in found.items() if values}


def paired_differences(minuend: Group, subtrahend: Group, figure: RunFigure) -> list[float]:
    """figure(minuend) - figure(subtrahend), one difference per block holding both."""
    first, second = block_means(minuend, figure), block_means(subtrahend, figure)
    return [first[b] - second[b] for b in sorted(first.keys() & second.keys(), key=str)]


def paired(numerator: Group, denominator: Group, figure: RunFigure, scale: float = 1.0) -> Ratio:
    """figure(numerator) / (scale x figure(denominator)), one ratio per block holding both."""
    top, bottom = numerator.by_block(figure), denominator.by_block(figure)
    return Ratio([top[b] / (scale * bottom[b]) for b in sorted(top.keys() & bottom.keys(), key=str)])


@dataclass
class Section:
    """Groups on the same (dataset, model): the only ones ranked against each other."""
    data: str
    model: str
    groups: list[Group] = field(default_factory=list)

    @property
    def synthetic(self) -> bool:
        return self.data == "synthetic"

    @property
    def title(self) -> str:
        return self.key + (" [synthetic data]" if self.synthetic else "")

    @property
    def key(self) -> str:
        """How a sweep's plan names this section."""
        return f"data={self.data}, model={self.model}"

    @property
    def runs(self) -> list[Run]:
        return [r for g in self.groups for r in g.runs]

    def plans(self) -> dict[str, Json]:
        """sweep directory -> its plan, for every sweep holding runs of this section."""
        return {str(s): read_plan(s) for s in dict.fromkeys(r.sweep for r in self.runs) if s is not None}





def configuration_key(run: Run) -> str:
    config = {k: v for k, v in flatten(run.config).items() if not k.startswith(NOT_CONFIGURATION)}
    return json.dumps(config, sort_keys=True, default=str)


def by_seed(run: Run) -> tuple[str, str]:
    return str(run.config.get("seed")), str(run.path)


def group_runs(runs: list[Run]) -> list[Group]:
    groups: dict[str, Group] = {}
    for run in runs:
        groups.setdefault(configuration_key(run), Group([])).runs.append(run)
    result = list(groups.values())
    for group in result:
        group.runs.sort(key=by_seed)
    return result


def label_groups(groups: list[Group]) -> None:
    """Short labels: the strategy, then only what differs between the groups (its knobs, the peers x CPUs shape, "on N
    nodes", other config values, an injected fault); "(control)" for a control arm."""
    firsts = [g.first for g in groups]
    flats = [flatten(run.config) for run in firsts]
    knob_names = {k for g in groups for k in flatten(g.first.knobs)}
    others = differing(flats, sorted({k for f in flats for k in f if k not in knob_names
                                      and not k.startswith((*NOT_A_LABEL, *strategy_blocks(*firsts)))}))
    chosen = {k.removesuffix(".name") for k in others if k.count(".") == 1 and k.endswith(".name")}
    others = [k for k in others if k.split(".")[0] not in chosen or k.endswith(".name")]  # optim=adamw says it all
    shapes_differ = len({g.first.shape for g in groups}) > 1
    nodes_differ = len({g.first.nnodes for g in groups}) > 1
    seen: dict[str, int] = {}
    for index, (group, flat) in enumerate(zip(groups, flats)):
        run = group.first
        knobs = flatten(run.knobs)
        changed = differing([flatten(g.first.knobs) for g in groups if g.first.strategy == run.strategy], sorted(knobs))
        name = run.strategy + (f"({','.join(f'{k}={show(knobs[k])}' for k in changed)})" if changed else "")
        rest = "".join(f" {k.removesuffix('.name') if k.split('.')[0] in chosen else k}={show(flat.get(k))}"
                       for k in others) + fault_label(run.config.get("fault") or {})
        shape = " {}×{}cpu".format(*run.shape) if shapes_differ else ""
        shape += f" on {run.nnodes} nodes" if nodes_differ and run.nnodes > 1 else ""
        label = name + shape + rest + (" (control)" if group.is_control else "")
        seen[label] = seen.get(label, 0) + 1
        group.label = label if seen[label] == 1 else f"{label} #{seen[label]}"  # differ only in unused keys
        group.family = name + rest
        group.color = f"C{index % 10}"


def differing(flats: list[Json], keys: list[str]) -> list[str]:
    """The keys whose value is not the same in every dict."""
    return [k for k in keys if len({json.dumps(f.get(k), default=str) for f in flats}) > 1]


def show(value: Any) -> str:
    return json.dumps(value, separators=(",", ":")) if isinstance(value, (list, dict)) else str(value)


def fault_label(fault: Json) -> str:
    injected = [f"{kind}={fault[kind]}" for kind in FAULT_KINDS if fault.get(kind) is not None]
    return f" fault:{','.join(injected)}@step{fault.get('at_step')}" if injected else ""


def sections_of(groups: list[Group]) -> list[Section]:
    sections: dict[tuple[str, str], Section] = {}
    for group in groups:
        data, model = group.first.dataset
        sections.setdefault((data, model), Section(data, model)).groups.append(group)
    for section in sections.values():
        label_groups(section.groups)
    return list(sections.values())


def mark_reruns(runs: list[Run]) -> None:
    """Runs their sweep's plan lists as run again after an earlier attempt of the same block."""
    plans: dict[Path, Json] = {}
    for run in runs:
        if run.sweep is None:
            continue
        plan = plans.setdefault(run.sweep, read_plan(run.sweep))
        rerun = {entry["job"] for entry in plan.get("reruns") or []}
        run.run_later = run.path.relative_to(run.sweep).as_posix() in rerun


def attach_attempts(groups: list[Group], attempts: list[Run]) -> list[Run]:
    """Each superseded attempt to the group of its configuration, where a block's first attempt counts (docs/report.md):
    it takes the block's place among the group's runs, the attempts after it stand beside them, not counted. The
    attempts of no group here are returned."""
    by_key = {configuration_key(g.first): g for g in groups}
    orphans: list[Run] = []
    for attempt in sorted(attempts, key=lambda r: str(r.path), reverse=True):  # superseded/<time>/: the latest first
        attempt.superseded = True
        group = by_key.get(configuration_key(attempt))
        if group is None:
            orphans.append(attempt)
            continue
        later = [r for r in group.runs if r.block == attempt.block]
        for run in later:
            run.counted = False
        group.attempts += later
        group.runs = sorted([r for r in group.runs if r not in later] + [attempt], key=by_seed)
    return orphans


def plan_refusal(plans: dict[str, Json]) -> str | None:
    """Why these sweeps' runs (directory -> plan) are not one design (other plan ids), one line; None if one plan."""
    ids = {sweep: plan.get("id") for sweep, plan in plans.items()}
    if len(ids) < 2 or (len(set(ids.values())) == 1 and None not in ids.values()):
        return None
    return ("the sweeps " + ", ".join(f"{sweep} (plan {plan_id or 'without an id'})" for sweep, plan_id in ids.items())
            + " are not one plan: their blocks were not planned together (seeds may repeat); report each sweep "
            "alone")


def off_plan(section: Section) -> list[str]:
    """Where the section's runs depart from their sweeps' plans, one line each: runs of blocks without a plan file; per
    plan (its id, else its folder), declared blocks not complete (planned job folders holding no run) and runs it
    neither planned nor records as reruns."""
    runs = [r for g in section.groups for r in [*g.runs, *g.attempts]]
    orphans = [r for r in runs if r.block[1] is not None and r.sweep is None]
    lines = []
    if orphans:
        lines.append(f"{counted(len(orphans), 'run')} of blocks without their sweep's plan file ({SWEEP_PLAN})")
    by_plan: dict[str, list[Path]] = {}
    for sweep in dict.fromkeys(r.sweep for r in runs if r.sweep):
        by_plan.setdefault(read_plan(sweep).get("id") or str(sweep), []).append(sweep)
    for sweeps in by_plan.values():
        plans, where = [read_plan(s) for s in sweeps], ", ".join(map(str, sweeps))
        declared = max((p.get("declaration") or {}).get("blocks") or 0 for p in plans)
        if not declared:
            lines.append(f"{where}: its plan declares no blocks (it predates declared plans)")
            continue
        order = [entry for p in plans for entry in p.get("order") or []]
        missing = sorted({e["job"] for e in order if not any(has_run(s / e["job"]) for s in sweeps)})
        listed = {e["job"] for e in order} | {a for p in plans for e in p.get("reruns") or [] for a in e["attempts"]}
        unlisted = sorted({r.path.relative_to(r.sweep).as_posix() for r in runs if r.sweep in sweeps} - listed)
        complete = declared - len({e["block"] for e in order if e["job"] in missing})
        parts = []
        if missing:
            parts.append(f"no run in {counted(len(missing), 'planned job folder')} ({examples(missing)})")
        if unlisted:
            parts.append(f"{counted(len(unlisted), 'run')} its plan does not list, as planned or rerun "
                         f"({examples(unlisted)})")
        if parts:
            lines.append(f"{where}: {complete} of its {declared} declared blocks complete; {'; '.join(parts)}"
                         + (": an interim look, not a verdict" if missing else ""))
    return lines


def has_run(path: Path) -> bool:
    """A run was started in this folder (its config written) or finished there (its summary)."""
    return bool(run_dirs_under(path) or started_runs_under(path))


def examples(found: list[str], shown: int = 3) -> str:
    return ", ".join(found[:shown]) + (", …" if len(found) > shown else "")


def shared_seeds(groups: list["Group"]) -> list[str]:
    """Where two blocks of one configuration ran the same seed (not independent), one line each."""
    found = []
    for group in groups:
        blocks_of: dict[Any, set[Block]] = {}
        for run in group.runs:
            if run.config.get("block") is not None:
                blocks_of.setdefault(run.config.get("seed"), set()).add(run.block)
        found += [f"{len(blocks)} blocks of {group.label or group.first.strategy} ran seed {seed} (not independent)"
                  for seed, blocks in blocks_of.items() if len(blocks) > 1]
    return found
