"""The runs a comparison report covers: summary.json plus per-peer logs, grouped.

A run is a directory holding summary.json (metrics/summary.py). Runs that differ
only in `seed` are repeats of one configuration (a Group). Groups are ranked only
against groups on the same (dataset, model): a Section.
"""
import json
import shlex
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from metrics.jsonl import read_jsonl
from metrics.rundir import SUPERSEDED, SWEEP_PLAN, RunDir, run_dirs_under, started_runs_under
from metrics.stats import Ratio

NOT_CONFIGURATION = ("seed", "block", "repeats", "progress", "progress_interval_s", "report.",
                     "lock")  # repeats of one configuration differ only in these
REQUIRED_CONFIG = ("strategy.name", "data.name", "model.name", "peers", "peer_cpus", "batch_size", "lr")
FAULT_KINDS = ("kill_peer", "raise_peer", "stall_peer")
CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
STRATEGY_BLOCKS = tuple(f"{p.stem}." for p in (CONF_DIR / "strategy").glob("*.yaml"))  # one strategy's knobs each
NOT_A_LABEL = ("strategy.", "peers", "peer_cpus", "fault.", *NOT_CONFIGURATION)  # named otherwise, or no knob
NOT_A_BASELINE_OVERRIDE = ("strategy.", "peers", "peer_cpus", "fault.", "launch.", "transport", "emulate.peer_cpu_share",
                           *NOT_CONFIGURATION)


@dataclass
class PeerLogs:
    rank: int
    steps: list[dict]
    evals: list[dict]
    resources: list[dict]


@dataclass
class Run:
    path: Path
    summary: dict
    peers: list[PeerLogs]
    speedup: float | None = None  # throughput / the equal-resource baseline's in the same block (attach_baselines)
    scaling_efficiency: float | None = None  # throughput / (peers x the one-peer baseline's in the same block)

    @property
    def config(self) -> dict:
        return self.summary["config"]

    @property
    def strategy(self) -> str:
        return self.config["strategy"]["name"]

    @property
    def knobs(self) -> dict:
        return self.summary.get("strategy_knobs", {})

    @property
    def total_cpus(self) -> int:
        return self.config["peers"] * self.config["peer_cpus"]

    @property
    def dataset(self) -> tuple[str, str]:
        return self.config["data"]["name"], self.config["model"]["name"]

    @property
    def completed(self) -> bool:
        return self.summary.get("status") == "completed"

    @property
    def planned(self) -> bool:
        """A run a sweep is about to start (launchers.sweeper plans its baselines with these)."""
        return self.summary.get("status") == PLANNED

    @property
    def block(self) -> tuple[str | None, int | None]:
        """(sweep directory, block) of a run of a multirun's block (config `block`; launchers/sweeper.py): runs of
        one block ran side by side. Runs outside blocks share (None, None)."""
        block = self.config.get("block")
        sweep = next((p for p in self.path.parents if (p / SWEEP_PLAN).exists()), None) if block is not None else None
        return str(sweep) if sweep else None, block

    @property
    def is_baseline(self) -> bool:
        """A single-process run others are compared with (summary.json's is_baseline, its strategy says so)."""
        return bool(self.summary.get("is_baseline"))

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

    def worst_worker_accuracy(self) -> float | None:
        """The lowest final test accuracy over workers: summary.json's accuracy_by_worker.worst, else the last
        evaluation of each worker in peer*/eval.jsonl."""
        worst = (self.summary.get("accuracy_by_worker") or {}).get("worst")
        if worst is not None:
            return worst
        finals = [p.evals[-1].get("test_accuracy") for p in self.peers if p.evals]
        finals = [a for a in finals if a is not None]
        return min(finals) if finals else None

    def peer_summaries(self) -> list[dict]:
        return self.summary.get("peers") or []

    def strategy_figures(self) -> dict:
        """peers[*].result.strategy flattened and merged: numbers as the mean over peers, other values as
        the distinct set."""
        values: dict[str, list] = {}
        for peer in self.peer_summaries():
            for key, value in flatten((peer.get("result") or {}).get("strategy") or {}).items():
                values.setdefault(key, []).append(value)
        merged = {}
        for key, vals in values.items():
            numbers = [v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
            if numbers and len(numbers) == len(vals):
                merged[key] = statistics.fmean(numbers)
            else:
                merged[key] = ", ".join(sorted({json.dumps(v) if not isinstance(v, str) else v for v in vals}))
        return merged


PLANNED = "planned"


def planned_run(config: dict, is_baseline: bool) -> Run:
    """A run not started yet, for planning a sweep's baselines."""
    return Run(Path(), {"status": PLANNED, "config": config, "is_baseline": is_baseline}, [])


def find_runs(dirs: list[Path]) -> tuple[list[Path], list[Path]]:
    """Run directories (holding summary.json) under dirs, and those started but without a summary; runs a resumed
    sweep moved aside (under a `superseded` directory) are not runs of the report."""
    def current(paths):
        return {p for p in paths if SUPERSEDED not in p.relative_to(top).parts}

    runs, incomplete = set(), set()
    for top in dirs:
        runs.update(current(run_dirs_under(top)))
        incomplete.update(current(started_runs_under(top)))
    return sorted(runs), sorted(incomplete - runs)


def load_run(path: Path) -> Run:
    run = RunDir(path)
    summary = json.loads(run.summary.read_text())
    missing = [k for k in REQUIRED_CONFIG if k not in flatten(summary.get("config") or {})]
    if missing:
        raise ValueError(f"its config lacks {', '.join(missing)}")
    peers = [PeerLogs(d.rank, read_jsonl(d.steps), read_jsonl(d.evals), read_jsonl(d.resources)) for d in run.peers()]
    return Run(path, summary, peers)


def flatten(config: dict, prefix: str = "") -> dict:
    """{"data": {"name": "digits"}} -> {"data.name": "digits"}."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat |= flatten(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


@dataclass
class Group:
    """Runs of one configuration (repeats differ only in seed)."""
    runs: list[Run]
    label: str = ""
    family: str = ""  # the label without the resource shape: one line in a throughput-vs-peers plot
    color: str = "C0"
    baseline: "Group | None" = None  # the equal-resource single-process group, set by attach_baselines
    one_peer: "Group | None" = None  # the single-process group with one peer of the same CPUs (scaling efficiency)
    speedup: Ratio | None = None     # throughput / the baseline's, paired by block (attach_baselines)
    ttt_speedup: Ratio | None = None  # the baseline's time-to-target / this one's, in blocks where both reached it
    efficiency: Ratio | None = None  # throughput / (peers x the one-peer baseline's), paired by block
    accuracy_change: list[float] | None = None  # worst worker's final accuracy - the baseline's, one per block

    @property
    def first(self) -> Run:
        return self.runs[0]

    def values(self, figure) -> list[float]:
        """figure(run) for each run, Nones dropped."""
        return [v for v in (figure(r) for r in self.runs) if v is not None]

    def seeds(self) -> list:
        return [r.config.get("seed") for r in self.runs]

    def by_block(self, figure) -> dict:
        """block -> the geometric mean of figure(run) over this group's runs in that block (Nones dropped)."""
        found: dict = {}
        for run in self.runs:
            value = figure(run)
            if value is not None and value > 0:
                found.setdefault(run.block, []).append(value)
        return {block: statistics.geometric_mean(values) for block, values in found.items()}


def block_means(group: Group, figure) -> dict:
    """block -> the mean of figure(run) over the group's runs in that block (Nones dropped)."""
    found: dict = {}
    for run in group.runs:
        if (value := figure(run)) is not None:
            found.setdefault(run.block, []).append(value)
    return {block: statistics.fmean(values) for block, values in found.items()}


def paired_differences(minuend: Group, subtrahend: Group, figure) -> list[float]:
    """figure(minuend) - figure(subtrahend), one difference per block holding both (runs in one block ran side by
    side, with the same seed)."""
    first, second = block_means(minuend, figure), block_means(subtrahend, figure)
    return [first[b] - second[b] for b in sorted(first.keys() & second.keys(), key=str)]


def paired(numerator: Group, denominator: Group, figure, scale: float = 1.0) -> Ratio:
    """figure(numerator) / (scale x figure(denominator)), one ratio per block holding both (a paired ratio: runs in
    one block ran side by side, so the machine's drift cancels); runs outside blocks pair with each other."""
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
        return f"data={self.data}, model={self.model}" + (" [synthetic data]" if self.synthetic else "")


def configuration_key(run: Run) -> str:
    config = {k: v for k, v in flatten(run.config).items() if k not in NOT_CONFIGURATION}
    return json.dumps(config, sort_keys=True, default=str)


def group_runs(runs: list[Run]) -> list[Group]:
    groups: dict[str, Group] = {}
    for run in runs:
        groups.setdefault(configuration_key(run), Group([])).runs.append(run)
    result = list(groups.values())
    for group in result:
        group.runs.sort(key=lambda r: (str(r.config.get("seed")), str(r.path)))
    return result


def label_groups(groups: list[Group]) -> None:
    """Short labels: the strategy, then only what differs between the groups: the strategy's knobs (among groups
    of that strategy), the resource shape (peers x CPUs per peer), any other config value, an injected fault."""
    flats = [flatten(g.first.config) for g in groups]
    knob_names = {k for g in groups for k in flatten(g.first.knobs)}
    others = differing(flats, sorted({k for f in flats for k in f if k not in knob_names
                                      and not k.startswith((*NOT_A_LABEL, *STRATEGY_BLOCKS))}))
    chosen = {k.removesuffix(".name") for k in others if k.count(".") == 1 and k.endswith(".name")}
    others = [k for k in others if k.split(".")[0] not in chosen or k.endswith(".name")]  # optim=adamw says it all
    shapes_differ = len({g.first.shape for g in groups}) > 1
    seen: dict[str, int] = {}
    for index, (group, flat) in enumerate(zip(groups, flats)):
        run = group.first
        knobs = flatten(run.knobs)
        changed = differing([flatten(g.first.knobs) for g in groups if g.first.strategy == run.strategy], sorted(knobs))
        name = run.strategy + (f"({','.join(f'{k}={show(knobs[k])}' for k in changed)})" if changed else "")
        rest = "".join(f" {k.removesuffix('.name') if k.split('.')[0] in chosen else k}={show(flat.get(k))}"
                       for k in others) + fault_label(run.config.get("fault") or {})
        shape = " {}×{}cpu".format(*run.shape) if shapes_differ else ""
        label = name + shape + rest
        seen[label] = seen.get(label, 0) + 1
        group.label = label if seen[label] == 1 else f"{label} #{seen[label]}"  # differ only in unused keys
        group.family = name + rest
        group.color = f"C{index % 10}"


def differing(flats: list[dict], keys: list[str]) -> list[str]:
    """The keys whose value is not the same in every dict."""
    return [k for k in keys if len({json.dumps(f.get(k), default=str) for f in flats}) > 1]


def show(value) -> str:
    return json.dumps(value, separators=(",", ":")) if isinstance(value, (list, dict)) else str(value)


def fault_label(fault: dict) -> str:
    injected = [f"{kind}={fault[kind]}" for kind in FAULT_KINDS if fault.get(kind) is not None]
    return f" fault:{','.join(injected)}@step{fault.get('at_step')}" if injected else ""


def sections_of(groups: list[Group]) -> list[Section]:
    sections: dict[tuple, Section] = {}
    for group in groups:
        data, model = group.first.dataset
        sections.setdefault((data, model), Section(data, model)).groups.append(group)
    for section in sections.values():
        label_groups(section.groups)
    return list(sections.values())


# Baselines: single-process runs on the same job that the others are measured against.

def is_baseline_candidate(candidate: Group, run: Run) -> bool:
    """A completed (or planned) single-process group on the same data, model, batch size per peer and optimizer (its
    `optim` block: a strategy whose preset picks another optimizer, e.g. diloco's AdamW, is compared with a process
    that trains with it too)."""
    first = candidate.first
    return (first.is_baseline and first.dataset == run.dataset and first.config["batch_size"] == run.config["batch_size"]
            and first.config.get("optim") == run.config.get("optim")
            and (bool(candidate.values(completed_throughput)) or first.planned))


def closest(candidates: list[Group], run: Run) -> Group | None:
    """The fairest of several baselines: fewest other knobs differing, then the run's own shape."""
    return min(candidates, key=lambda g: (config_distance(g.first, run), g.first.shape != run.shape), default=None)


def baseline_for(run: Run, groups: list[Group]) -> Group | None:
    """The equal-resource baseline: a `single` group with as many CPUs in total (peers x peer_cpus)."""
    return closest([g for g in groups if is_baseline_candidate(g, run) and g.first.total_cpus == run.total_cpus], run)


def one_peer_baseline_for(run: Run, groups: list[Group]) -> Group | None:
    """The scaling-efficiency baseline: a `single` group with one peer of the run's CPUs per peer."""
    return closest([g for g in groups if is_baseline_candidate(g, run)
                    and g.first.shape == (1, run.config["peer_cpus"])], run)


def config_distance(a: Run, b: Run) -> int:
    """How many knobs differ, besides strategy, peers and seed (the closest baseline is the fairest)."""
    flat_a, flat_b = flatten(a.config), flatten(b.config)
    return sum(flat_a.get(k) != flat_b.get(k) for k in flat_a.keys() | flat_b.keys()
               if not k.startswith(("strategy.", "peers", "peer_cpus", *STRATEGY_BLOCKS, *NOT_CONFIGURATION)))


def completed_throughput(run: Run) -> float | None:
    return run.summary.get("throughput_samples_per_s") if run.completed else None


def completed_time_to_target(run: Run) -> float | None:
    return run.summary.get("time_to_target_s") if run.completed else None


def completed_accuracy(run: Run) -> float | None:
    return run.worst_worker_accuracy() if run.completed else None


def attach_baselines(groups: list[Group]) -> None:
    """Each group's baselines and its ratios to them, paired by block; each run's speedup and scaling efficiency
    against the baseline runs of its own block."""
    for group in groups:
        group.baseline = baseline_for(group.first, groups)
        group.one_peer = one_peer_baseline_for(group.first, groups)
        peers = group.first.config["peers"]
        if group.baseline:
            group.speedup = paired(group, group.baseline, completed_throughput)
            group.ttt_speedup = paired(group.baseline, group, completed_time_to_target)
            group.accuracy_change = paired_differences(group, group.baseline, completed_accuracy)
        if group.one_peer:
            group.efficiency = paired(group, group.one_peer, completed_throughput, peers)
        for run in group.runs:
            throughput = run.summary.get("throughput_samples_per_s")
            if throughput is None:
                continue
            if group.baseline and run.block in (same := group.baseline.by_block(completed_throughput)):
                run.speedup = throughput / same[run.block]
            if group.one_peer and run.block in (same := group.one_peer.by_block(completed_throughput)):
                run.scaling_efficiency = throughput / (peers * same[run.block])


def missing_baselines(runs: list[Run]) -> list[dict]:
    """Hydra overrides of each baseline these runs lack: the equal-resource `single` run (peers=N, peer_cpus=c)
    and the one-peer `single` run (peers=1, peer_cpus=c) of every configuration, on the same job."""
    groups = group_runs(runs)
    missing = {}
    for group in groups:
        run = group.first
        if baseline_for(run, groups) is None:
            overrides = baseline_overrides(run, *run.shape)
            missing.setdefault(json.dumps(overrides, default=str), overrides)
        if one_peer_baseline_for(run, groups) is None:
            overrides = baseline_overrides(run, 1, run.config["peer_cpus"])
            missing.setdefault(json.dumps(overrides, default=str), overrides)
    return list(missing.values())


def baseline_overrides(run: Run, peers: int, peer_cpus: int) -> dict:
    """strategy=single with this shape, plus the run's job settings that differ from the defaults in conf/."""
    overrides = {"strategy": run.config["report"]["baseline_strategy"], "peers": peers, "peer_cpus": peer_cpus}
    defaults = default_config(run.config)
    for key, value in flatten(run.config).items():
        if key in defaults and defaults[key] != value and not key.startswith(NOT_A_BASELINE_OVERRIDE):
            group_choice = key.count(".") == 1 and key.endswith(".name")  # model.name=tiny: model=tiny
            overrides[key.removesuffix(".name") if group_choice else key] = value
    return overrides


def default_config(config: dict) -> dict:
    """conf/config.yaml with, for each config group, the option the run chose (its `name`), flattened; a group's
    `name` defaults to the option config.yaml picks."""
    root = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "config.yaml"))
    chosen = {k: v for entry in root.pop("defaults") if isinstance(entry, dict) for k, v in entry.items()}
    root.pop("hydra", None)
    defaults = flatten(root)
    for group, default_option in chosen.items():
        if group == "strategy" or not isinstance(config.get(group), dict):
            continue
        path = CONF_DIR / group / f"{config[group].get('name', default_option)}.yaml"
        block = OmegaConf.to_container(OmegaConf.load(path)) if path.exists() else {}
        block.pop("defaults", None)
        defaults |= {f"{group}.{k}": v for k, v in flatten(block).items()} | {f"{group}.name": default_option}
    return defaults


def override_args(overrides: dict) -> list[str]:
    """Hydra's key=value arguments for overrides."""
    def value(v) -> str:
        if v is None or isinstance(v, (bool, list, dict)):
            return json.dumps(v, separators=(",", ":"))
        text = str(v)
        return text if text.replace(".", "").replace("_", "").replace("-", "").replace("/", "").isalnum() \
            else f"'{text}'"
    return [f"{k}={value(v)}" for k, v in overrides.items()]


def override_command(overrides: dict) -> str:
    """The train.py command line for Hydra overrides."""
    return "python train.py " + " ".join(map(shlex.quote, override_args(overrides)))


def load_runs(dirs: list[Path]) -> tuple[list[Section], list[str]]:
    """Sections of grouped runs under dirs (speedups attached), and the runs left out, with why."""
    paths, incomplete = find_runs(dirs)
    left_out = [f"{p} (no summary.json: the launcher itself was stopped)" for p in incomplete]
    runs = []
    for path in paths:
        try:
            runs.append(load_run(path))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            left_out.append(f"{path} (unreadable summary.json: {exc})")
    groups = group_runs(runs)
    attach_baselines(groups)
    return sections_of(groups), left_out
