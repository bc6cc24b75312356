"""Baselines: single-process runs on the same job that the others are measured against, the control arm beside
them, and the commands that would produce the baselines a comparison lacks."""
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from metrics.recording.rundir import RunDir, run_folders
from metrics.report.nodes import load
from metrics.report.runs import (CONF_DIR, NOT_CONFIGURATION, Group, Run, Section, attach_attempts,
                                 configuration_key, find_runs, flatten, group_runs, load_unsummarised, mark_reruns,
                                 paired, paired_differences, sections_of, strategy_blocks)
from metrics.summary.schema import Json

NOT_A_BASELINE_OVERRIDE = ("strategy.", "peers", "peer_cpus", "fault.", "launch.", "transport", "network",
                           "emulate.peer_cpu_share", "arm", *NOT_CONFIGURATION)


def is_baseline_candidate(candidate: Group, run: Run) -> bool:
    """A completed (or planned) single-process group, never a control arm, on the same data, model, batch size per peer
    and optimizer (`optim`)."""
    first = candidate.first
    return (first.is_baseline and not first.is_control and first.dataset == run.dataset
            and first.config["batch_size"] == run.config["batch_size"]
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
               if not k.startswith(("strategy.", "peers", "peer_cpus", "arm", *strategy_blocks(a, b),
                                    *NOT_CONFIGURATION)))


def completed_throughput(run: Run) -> float | None:
    return run.summary.throughput_samples_per_s if run.completed else None


def completed_accuracy(run: Run) -> float | None:
    return run.worst_worker_accuracy() if run.completed else None


def averaging(groups: list[Group]) -> list[Group]:
    """The configurations compared: every group but the single-process baselines and the control arms."""
    return [g for g in groups if not g.first.is_baseline and not g.is_control]


def controlled(group: Group, groups: list[Group]) -> Group | None:
    """The group this control arm repeats: the same configuration but for `arm`."""
    key = json.loads(configuration_key(group.first))
    key.pop("arm", None)
    return next((g for g in groups if not g.is_control and json.loads(configuration_key(g.first)) | {"arm": None}
                 == key | {"arm": None}), None)


def attach_baselines(groups: list[Group]) -> None:
    """Each group's baselines, control arm and ratios to them (paired by block), and each run's against its block's."""
    for group in groups:
        if group.is_control and (repeated := controlled(group, groups)):
            repeated.control = group
    for group in groups:
        if group.is_control:
            continue
        group.baseline = baseline_for(group.first, groups)
        group.one_peer = one_peer_baseline_for(group.first, groups)
        peers = group.first.config["peers"]
        if group.baseline:
            group.speedup = paired(group, group.baseline, completed_throughput)
            group.accuracy_change = paired_differences(group, group.baseline, completed_accuracy)
        if group.one_peer:
            group.efficiency = paired(group, group.one_peer, completed_throughput, peers)
        for run in group.runs:
            throughput = run.summary.throughput_samples_per_s
            if throughput is None:
                continue
            if group.baseline and run.block in (same := group.baseline.by_block(completed_throughput)):
                run.speedup = throughput / same[run.block]
            if group.one_peer and run.block in (same := group.one_peer.by_block(completed_throughput)):
                run.scaling_efficiency = throughput / (peers * same[run.block])


def equal_resource_baselines(runs: list[Run]) -> list[int]:
    """Indices of the runs that are some averaging run's equal-resource baseline (the ones a control arm repeats)."""
    groups = group_runs(runs)
    wanted = [b for b in (baseline_for(g.first, groups) for g in averaging(groups)) if b]
    members = {id(r) for g in wanted for r in g.runs}
    return [i for i, run in enumerate(runs) if id(run) in members]


def missing_baselines(runs: list[Run]) -> list[Json]:
    """Hydra overrides of each baseline these runs lack: the equal-resource and the one-peer `single` run."""
    groups = group_runs(runs)
    missing: dict[str, Json] = {}
    for group in groups:
        run = group.first
        if run.is_control:
            continue
        for baseline, shape in ((baseline_for, run.shape), (one_peer_baseline_for, (1, run.config["peer_cpus"]))):
            if baseline(run, groups) is None:
                overrides = baseline_overrides(run, *shape)
                missing.setdefault(json.dumps(overrides, default=str), overrides)
    return list(missing.values())


def baseline_overrides(run: Run, peers: int, peer_cpus: int) -> Json:
    """strategy=single with this shape, plus the run's job settings that differ from the defaults in conf/."""
    overrides = {"strategy": run.config["report"]["baseline_strategy"], "peers": peers, "peer_cpus": peer_cpus}
    defaults = default_config(run.config)
    for key, value in flatten(run.config).items():
        if key in defaults and defaults[key] != value and not key.startswith(NOT_A_BASELINE_OVERRIDE):
            group_choice = key.count(".") == 1 and key.endswith(".name")  # model.name=tiny: model=tiny
            overrides[key.removesuffix(".name") if group_choice else key] = value
    return overrides


def conf_file(path: Path) -> Json:
    found = OmegaConf.to_container(OmegaConf.load(path))
    if not isinstance(found, dict):
        raise ValueError(f"{path}: not a mapping")
    return {str(key): value for key, value in found.items()}


def default_config(config: Json) -> Json:
    """conf/config.yaml flattened, each config group's block from the option the run chose (default: config.yaml's)."""
    root = conf_file(CONF_DIR / "config.yaml")
    chosen = {k: v for entry in root.pop("defaults") if isinstance(entry, dict) for k, v in entry.items()}
    root.pop("hydra", None)
    defaults = flatten(root)
    for group, default_option in chosen.items():
        if group == "strategy" or not isinstance(config.get(group), dict):
            continue
        path = CONF_DIR / group / f"{config[group].get('name', default_option)}.yaml"
        block = conf_file(path) if path.exists() else {}
        block.pop("defaults", None)
        defaults |= {f"{group}.{k}": v for k, v in flatten(block).items()} | {f"{group}.name": default_option}
    return defaults


def override_args(overrides: Json) -> list[str]:
    def value(v: Any) -> str:
        if v is None or isinstance(v, (bool, list, dict)):
            return json.dumps(v, separators=(",", ":"))
        text = str(v)
        return text if text.replace(".", "").replace("_", "").replace("-", "").replace("/", "").isalnum() \
            else f"'{text}'"
    return [f"{k}={value(v)}" for k, v in overrides.items()]


def tool_command() -> str:
    """The tool's command as the user types it: `avgbench` where the installed command runs, else `python train.py`."""
    return "avgbench" if Path(sys.argv[0]).name == "avgbench" else "python train.py"


def override_command(overrides: Json) -> str:
    return " ".join([tool_command(), *map(shlex.quote, override_args(overrides))])


def load_runs(dirs: list[Path]) -> tuple[list[Section], list[str]]:
    """Sections of grouped runs under dirs (baselines, control arms, attempts attached), and what was left out, why."""
    paths, superseded = find_runs(dirs)
    found, aside = run_folders(paths), run_folders(superseded)
    runs, attempts, left_out = list[Run](), list[Run](), list[str]()
    for path, folders in [*found.items(), *aside.items()]:
        summarised = [f for f in folders if RunDir(f).summary.exists()]
        try:
            run = load(path, summarised) if summarised else load_unsummarised(path, folders)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            left_out.append(f"{path} (unreadable {'summary.json' if summarised else 'config, no summary.json'}: {exc})")
            continue
        (attempts if path in aside else runs).append(run)
    groups = group_runs(runs)
    mark_reruns(runs)
    orphans = attach_attempts(groups, attempts)  # before the baselines: their ratios pair the counted attempts
    attach_baselines(groups)
    left_out += [f"{a.path} (a superseded attempt of a configuration with no run here; status "
                 f"{a.summary.status})" for a in orphans]
    return sections_of(groups), left_out
