"""A multirun in paired blocks (hydra.sweeper in conf/config.yaml).

`train.py -m strategy=ring,stepwise repeats=3` runs every configuration of the command line and the equal-resource
baselines its report needs (metrics.report_data.missing_baselines; `report.baselines=off`: none) in `repeats`
blocks. Each block holds one run of every job, in a shuffled order (a fixed shuffle per block, so the same command
gives the same order), with seed = the job's seed + the block index and `block` = the block index; the report
compares each configuration with the baseline run in the same block. Jobs go to SWEEP_DIR/block<B>/<name>, the
name made of the swept values (baselines: baseline_<peers>x<cpus>), so a rerun of the same command in the same
`hydra.sweep.dir` finds them: a job whose summary.json says completed, with the same configuration, is kept and
skipped; any other job directory (failed, interrupted, another configuration) is moved aside into
SWEEP_DIR/superseded/<time>/ (the report ignores it) and the job runs again.
"""
import json
import random
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf, open_dict

from job.device import resolve_device
from job.errors import ConfigError
from launchers.config import check_repeats, strategy_class
from launchers.lock import take_sweep_lock
from launchers.shape import peers_from_default, shape_lines, shape_of
from metrics.report_data import STRATEGY_BLOCKS, flatten, missing_baselines, override_args, planned_run
from metrics.rundir import SUPERSEDED, SWEEP_PLAN, RunDir

NOT_SHARED = ("strategy", "peers", "peer_cpus", "fault.", "seed", "block", "repeats", *STRATEGY_BLOCKS)  # not for baselines
RERUN_FREE = ("progress", "progress_interval_s", "repeats", "report.")  # a kept run may differ in these


@dataclass
class Job:
    name: str            # the job directory below block<B>/
    overrides: list[str]  # the configuration's overrides, without seed and block
    seed: int            # the configuration's own seed; block B runs seed + B


class BlockSweeper(BasicSweeper):
    def __init__(self, max_batch_size: int | None = None, params: dict | None = None,
                 job_subdir: str = "block{block}/{name}") -> None:
        super().__init__(max_batch_size, params)
        self.job_subdir = job_subdir  # {block} and {name} are filled in; {env:VAR,DEFAULT} is resolved by the job

    def sweep(self, arguments: list[str]):
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        parsed = parser.parse_overrides(self._parse_config() + list(arguments))
        try:
            repeats = check_repeats(self.config.repeats)
            jobs = self.configurations(parsed)
        except ConfigError as exc:
            print(f"avgbench: error: {exc}", file=sys.stderr)
            sys.exit(2)
        for line in self.shape_notice(jobs):  # the multirun's first lines: before the lock's and Hydra's
            print(line, flush=True)
        take_sweep_lock(str(self.config.lock))
        if self.config.report.baselines == "auto":
            jobs += self.baselines(jobs, [o.input_line for o in parsed if not o.is_sweep_override()])
        sweep_dir = Path(self.config.hydra.sweep.dir)
        aside = sweep_dir / SUPERSEDED / time.strftime("%Y-%m-%d_%H-%M-%S")
        sweep_dir.mkdir(parents=True, exist_ok=True)
        move_aside(sweep_dir / "multirun.yaml", aside / "multirun.yaml")  # an earlier command's
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        planned = [self.job_overrides(job, block) for block in range(repeats) for job in shuffled(jobs, block)]
        to_run, kept = self.resume(sweep_dir, planned, aside)
        write_plan(sweep_dir, planned, kept)
        if kept:
            print(f"avgbench: {len(kept)} of {len(planned)} runs already completed in {sweep_dir}: kept, not rerun",
                  flush=True)
        self.overrides = list(self.split_overrides_to_chunks(to_run, self.max_batch_size)) if to_run else []
        returns, first = [], 0
        while not self.is_done():
            batch = self.get_job_batch()
            returns.append(self.launcher.launch(batch, initial_job_idx=first))
            first += len(batch)
        return returns

    # The plan.

    def configurations(self, parsed: list) -> list[Job]:
        """The command line's configurations (the cartesian product of its sweeps), named by their swept values
        (nothing swept: by the strategy)."""
        if any(o.get_key_element() == "repeats" and o.is_sweep_override() for o in parsed):
            raise ConfigError("repeats cannot be swept: it is the number of blocks of the whole multirun")
        swept = {o.get_key_element() for o in parsed if o.is_sweep_override()}
        jobs = []
        for overrides in self.split_arguments(parsed, None)[0]:
            cfg = self.compose(overrides)
            named = [o for o in overrides if key_of(o) in swept] or [f"strategy={cfg.strategy.name}"]
            jobs.append(Job(job_name(named), [o for o in overrides if not is_seed(o)], int(cfg.seed)))
        return unique_names(jobs)

    def shape_notice(self, jobs: list[Job]) -> list[str]:
        """Each configuration's shape lines (launchers/shape.py: peers from the default and how to ask for more,
        oversubscription), once each; a line that holds for some configurations only names them. None where the
        jobs run on other hosts (SLURM), whose cores this one does not know: each job says its own."""
        if not str(self.config.hydra.launcher._target_).endswith(".BasicLauncher"):
            return []
        holders: dict[str, list[str]] = {}
        for job in jobs:
            cfg = self.compose(job.overrides)
            shape = shape_of(cfg, strategy_class(cfg).launch_spec(cfg), peers_from_default(cfg))
            for line in shape_lines(shape):
                holders.setdefault(line, []).append(job.name)
        return [line if len(names) == len(jobs) else line.replace("avgbench: ", f"avgbench: {', '.join(names)}: ", 1)
                for line, names in holders.items()]

    def baselines(self, jobs: list[Job], plain: list[str]) -> list[Job]:
        """The baselines the configurations' report needs and the sweep lacks, with the command line's plain
        (not swept) overrides that concern the job (e.g. experiment=slurm), not those of a strategy, a shape,
        a fault or a seed."""
        planned = [planned_run(OmegaConf.to_container(cfg, resolve=True), strategy_class(cfg).is_baseline)
                   for cfg in (self.compose(job.overrides) for job in jobs)]
        baselines = []
        missing = missing_baselines(planned)
        for overrides, name in zip(missing, baseline_names(missing)):
            own = override_args(overrides)
            keys = {key_of(o) for o in own}
            shared = [o for o in plain if key_of(o) not in keys and not key_of(o).startswith(NOT_SHARED)]
            baselines.append(Job(name, shared + own, int(self.config.seed)))
        return unique_names(baselines)

    def compose(self, overrides: list[str]):
        """The job's config, as the launcher will compose it, without the hydra node."""
        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(cfg):
            del cfg["hydra"]
        return cfg

    def job_overrides(self, job: Job, block: int) -> list[str]:
        subdir = re.sub(r"\{env:([^}]*)\}", r"${oc.env:\1}",  # resolved by the job, e.g. on its node
                        self.job_subdir.replace("{block}", str(block)).replace("{name}", job.name))
        return [*job.overrides, f"seed={job.seed + block}", f"block={block}", f"hydra.sweep.subdir='{subdir}'"]

    # Resuming in the same sweep directory.

    def resume(self, sweep_dir: Path, planned: list[list[str]], aside: Path) -> tuple[list[list[str]], list[str]]:
        """The jobs to run and the job directories kept; moves every other existing job directory into aside."""
        to_run, kept = [], []
        for overrides in planned:
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
            job_dir = sweep_dir / cfg.hydra.sweep.subdir
            if not job_dir.exists():
                to_run.append(overrides)
                continue
            with open_dict(cfg):
                del cfg["hydra"]
            if completed_with(job_dir, OmegaConf.to_container(cfg, resolve=True)):
                kept.append(str(job_dir.relative_to(sweep_dir)))
                continue
            target = aside / job_dir.relative_to(sweep_dir)
            move_aside(job_dir, target)
            print(f"avgbench: {job_dir} did not complete with this configuration: moved to {target}, running it "
                  "again", flush=True)
            to_run.append(overrides)
        return to_run, kept


def completed_with(job_dir: Path, config: dict) -> bool:
    """The job directory holds a completed run of this configuration (device resolved as the run resolved it)."""
    try:
        summary = json.loads(RunDir(job_dir).summary.read_text())
    except (OSError, ValueError):
        return False
    config = config | {"device": resolve_device(config["device"])}
    same = lambda flat: {k: v for k, v in flat.items() if not k.startswith(RERUN_FREE)}  # noqa: E731
    return summary.get("status") == "completed" and same(flatten(summary.get("config") or {})) == same(flatten(config))


def move_aside(path: Path, target: Path) -> None:
    """Keep what an earlier attempt wrote, out of the way (never deleted)."""
    if path.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        path.rename(target)


def shuffled(jobs: list[Job], block: int) -> list[Job]:
    """The block's order: a shuffle seeded by the block index (the same command gives the same order)."""
    order = list(jobs)
    random.Random(block).shuffle(order)
    return order


def write_plan(sweep_dir: Path, planned: list[list[str]], kept: list[str]) -> None:
    path = sweep_dir / SWEEP_PLAN
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"jobs": planned, "kept": kept, "to_run": len(planned) - len(kept)}, indent=1))


def planned_jobs(sweep_dir: Path) -> int | None:
    """How many jobs this invocation of the sweep runs (the plan's count, kept runs excluded)."""
    try:
        return json.loads((Path(sweep_dir) / SWEEP_PLAN).read_text())["to_run"]
    except (OSError, ValueError, KeyError):
        return None


def key_of(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def is_seed(override: str) -> bool:
    return key_of(override) == "seed"


def job_name(overrides: list[str]) -> str:
    """key=value,key=value of the swept overrides, as a directory name."""
    return re.sub(r"[^A-Za-z0-9._=,+-]", "_", ",".join(o.lstrip("+~") for o in overrides))


def baseline_names(missing: list[dict]) -> list[str]:
    """baseline_<peers>x<cpus> for each baseline's overrides, followed by the settings in which baselines differ
    (e.g. _optim-adamw; "=" would not parse as a Hydra override), so that two of one shape get two directories."""
    apart = [k for k in dict.fromkeys(k for o in missing for k in o)
             if k not in ("peers", "peer_cpus") and len({str(o.get(k)) for o in missing}) > 1]
    return ["".join([f"baseline_{o['peers']}x{o['peer_cpus']}", *(f"_{k}-{o[k]}" for k in apart if k in o)])
            for o in missing]


def unique_names(jobs: list[Job]) -> list[Job]:
    seen: dict[str, int] = {}
    for job in jobs:
        seen[job.name] = seen.get(job.name, 0) + 1
        if seen[job.name] > 1:
            job.name = f"{job.name}_{seen[job.name]}"
    return jobs
