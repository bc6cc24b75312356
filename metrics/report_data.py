"""The runs a comparison report covers: summary.json plus per-peer logs, grouped.

A run is a directory holding summary.json (metrics/summary.py). Runs that differ
only in `seed` are repeats of one configuration (a Group). Groups are ranked only
against groups on the same (dataset, model): a Section.
"""
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from metrics.jsonl import read_jsonl

NOT_CONFIGURATION = ("seed", "progress")  # repeats of one configuration differ only in these
REQUIRED_CONFIG = ("strategy.name", "data.name", "model.name", "peers", "peer_cpus", "batch_size", "lr")
LABEL_EXCLUDED = ("seed", "progress", "strategy.", "peers", "peer_cpus", "fault.")  # named otherwise, or no knob
FAULT_KINDS = ("kill_peer", "raise_peer", "stall_peer")


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
    speedup: float | None = None  # vs the matching single-process baseline, set by attach_speedups

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
    def reference(self) -> PeerLogs | None:
        """The lowest-rank peer that trained (the one summary.json takes evaluations from)."""
        return next((p for p in self.peers if p.steps), None)

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


def find_runs(dirs: list[Path]) -> tuple[list[Path], list[Path]]:
    """Run directories (holding summary.json) under dirs, and those started but without a summary."""
    runs, incomplete = set(), set()
    for top in dirs:
        runs.update(p.parent for p in top.rglob("summary.json"))
        incomplete.update(p.parent.parent for p in top.rglob(".avgbench/config.yaml"))
    return sorted(runs), sorted(incomplete - runs)


def load_run(path: Path) -> Run:
    summary = json.loads((path / "summary.json").read_text())
    missing = [k for k in REQUIRED_CONFIG if k not in flatten(summary.get("config") or {})]
    if missing:
        raise ValueError(f"its config lacks {', '.join(missing)}")
    peer_dirs = sorted(path.glob("peer*"), key=lambda p: int(p.name.removeprefix("peer")))
    peers = [PeerLogs(int(d.name.removeprefix("peer")), read_jsonl(d / "steps.jsonl"),
                      read_jsonl(d / "eval.jsonl"), read_jsonl(d / "resources.jsonl")) for d in peer_dirs]
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
    color: str = "C0"

    @property
    def first(self) -> Run:
        return self.runs[0]

    def values(self, figure) -> list[float]:
        """figure(run) for each run, Nones dropped."""
        return [v for v in (figure(r) for r in self.runs) if v is not None]

    def seeds(self) -> list:
        return [r.config.get("seed") for r in self.runs]


@dataclass
class Section:
    """Groups on the same (dataset, model): the only ones ranked against each other."""
    data: str
    model: str
    groups: list[Group] = field(default_factory=list)

    @property
    def synthetic(self) -> bool:
        return self.data == "synthetic"


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
    """Label: strategy(knobs) peers x cpus, plus every other config value that differs between the groups."""
    flats = [flatten(g.first.config) for g in groups]
    keys = sorted({k for f in flats for k in f})
    differing = [k for k in keys if not k.startswith(LABEL_EXCLUDED)
                 and len({json.dumps(f.get(k), default=str) for f in flats}) > 1]
    for index, (group, flat) in enumerate(zip(groups, flats)):
        run = group.first
        knobs = ",".join(f"{k}={v}" for k, v in run.knobs.items())
        label = f"{run.strategy}({knobs})" if knobs else run.strategy
        label += f" {run.config['peers']}x{run.config['peer_cpus']}cpu"
        label += "".join(f" {k}={flat.get(k)}" for k in differing)
        group.label = label + fault_label(run.config.get("fault") or {})
        group.color = f"C{index % 10}"


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


def baseline_for(run: Run, groups: list[Group]) -> Group | None:
    """The single-process group on the same data and model with as many CPUs, closest in the other knobs."""
    candidates = [g for g in groups if g.first.strategy == "single" and g.first.dataset == run.dataset
                  and g.first.total_cpus == run.total_cpus and g.values(completed_throughput)]
    return min(candidates, key=lambda g: config_distance(g.first, run), default=None)


def config_distance(a: Run, b: Run) -> int:
    """How many knobs differ, besides strategy, peers and seed (the closest baseline is the fairest)."""
    flat_a, flat_b = flatten(a.config), flatten(b.config)
    return sum(flat_a.get(k) != flat_b.get(k) for k in flat_a.keys() | flat_b.keys()
               if not k.startswith(("strategy.", "peers", "peer_cpus", *NOT_CONFIGURATION)))


def completed_throughput(run: Run) -> float | None:
    return run.summary.get("throughput_samples_per_s") if run.completed else None


def attach_speedups(groups: list[Group]) -> None:
    for group in groups:
        for run in group.runs:
            baseline = baseline_for(run, groups)
            throughput = run.summary.get("throughput_samples_per_s")
            if baseline and throughput is not None:
                run.speedup = throughput / statistics.fmean(baseline.values(completed_throughput))


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
    attach_speedups(groups)
    return sections_of(groups), left_out
