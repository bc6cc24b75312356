"""A multirun in paired blocks (docs/report.md): each configuration, and the baselines and control arm its report
needs, in `repeats` blocks of a Williams order, its design declared first; a rerun keeps completed jobs."""
import json
import re
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext
from omegaconf import DictConfig, OmegaConf, open_dict

from job.device import resolve_device
from job.errors import ConfigError
from job.process import process_started_at
from launchers.hydra_internals import basic_sweeper
from launchers.config import PROJECT, container, project_targets, strategy_class
from launchers.lock import take_sweep_lock
from launchers.schema import check_value
from launchers.shape import peers_from_default, shape_lines, shape_of
from metrics.recording.machine import fingerprint
from metrics.report.baselines import missing_baselines, override_args
from metrics.report.design import block_order, control_jobs, declaration, order_of, planned_blocks
from metrics.report.primary import from_dict
from metrics.report.noise import sweep_noise_files
from metrics.report.nodes import load
from metrics.report.runs import CONTROL, Run, flatten, planned_run, read_plan, strategy_blocks
from metrics.recording.rundir import SUPERSEDED, SWEEP_PLAN, run_dirs_under, run_folders

if TYPE_CHECKING:
    from launchers.hydra_internals import BasicSweeper
else:
    BasicSweeper = basic_sweeper()

NOT_SHARED = ("strategy", "peers", "peer_cpus", "fault.", "seed", "block", "plan", "repeats",
              "hydra.launcher.nodes")  # not for baselines, nor the configurations' strategies' knobs
RERUN_FREE = ("progress", "progress_interval_s", "repeats", "report.", "plan")  # a kept run may differ in these
FROM_THE_NODE = "${oc.env:"  # a value the job resolves on its node (e.g. launch.node_rank from SLURM_NODEID)
ROOT = Path(__file__).resolve().parent.parent
DECLARED = ("primary", "comparisons", "blocks")  # a resumed sweep that changes one of these gets no verdict
Planned = tuple[str, list[str]]  # a job folder and its overrides


@dataclass
class Job:
    name: str            # the job directory below block<B>/
    overrides: list[str]  # the configuration's overrides, without seed, block and repeats
    seed: int            # the configuration's own seed; block B runs seed + B


class BlockSweeper(BasicSweeper):
    config: DictConfig  # these three are set by setup(), before sweep()
    hydra_context: HydraContext
    launcher: Launcher

    def __init__(self, max_batch_size: int | None = None, params: dict | None = None,
                 job_subdir: str = "block{block}/{name}") -> None:
        super().__init__(max_batch_size, params)
        self.job_subdir = job_subdir  # {block} and {name} are filled in; {env:VAR,DEFAULT} is resolved by the job
        self.jobs_launched = 0

    def sweep(self, arguments: list[str]) -> list[Sequence[JobReturn]]:
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        parsed = parser.parse_overrides(self._parse_config() + list(arguments))
        try:
            repeats = self.config.repeats
            check_value("repeats", repeats)
            project_targets(self.config.report.project, [o.input_line for o in parsed if o.input_line is not None])
            parsed = [o for o in parsed if o.get_key_element() != PROJECT]  # the report's targets, not the jobs'
            jobs = self.configurations(parsed)
            if self.config.report.baselines == "auto":
                jobs += self.baselines(jobs, [o.input_line for o in parsed
                                              if o.input_line is not None and not o.is_sweep_override()])
            jobs += self.controls(jobs)
            design, design_lines = self.design(jobs, repeats)
        except (ConfigError, ValueError) as exc:
            print(f"avgbench: error: {exc}", file=sys.stderr)
            sys.exit(2)
        for line in [*self.shape_notice(jobs), *design_lines]:  # the multirun's first lines: before the lock's
            print(line, flush=True)
        take_sweep_lock(str(self.config.lock))
        sweep_dir = Path(self.config.hydra.sweep.dir)
        aside = sweep_dir / SUPERSEDED / time.strftime("%Y-%m-%d_%H-%M-%S")
        sweep_dir.mkdir(parents=True, exist_ok=True)
        move_aside(sweep_dir / "multirun.yaml", aside / "multirun.yaml")  # an earlier command's
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        blocks = design["blocks"]
        earlier = read_plan(sweep_dir)
        plan_id = earlier.get("id") if earlier else uuid.uuid4().hex[:12]  # resumed or extended: its plan continues
        order = [(block, position, jobs[index]) for block in range(blocks)
                 for position, index in enumerate(block_order(len(jobs), block))]
        planned = [self.job_overrides(job, block, blocks, plan_id) for block, _, job in order]
        folders = [self.job_folder(job, block) for block, _, job in order]
        to_run, kept, moved = self.resume(sweep_dir, list(zip(folders, planned)), aside)
        placed = [(block, position, folder) for (block, position, _), folder in zip(order, folders)]
        plan = write_plan(sweep_dir, planned, kept, design, placed, moved, earlier, plan_id)
        if plan.get("changed"):
            print(f"avgbench: warning: {plan['changed']}: its report will give no verdict", flush=True)
        if kept:
            print(f"avgbench: {len(kept)} of {len(planned)} runs already completed in {sweep_dir}: kept, not rerun",
                  flush=True)
        returns = []
        block_of = {folder: block for (block, _, _), folder in zip(order, folders)}
        try:
            for block in range(blocks):
                block_jobs = [(folder, overrides) for folder, overrides in to_run if block_of[folder] == block]
                returns += self.launch(block_jobs)
                failed = [(folder, overrides) for folder, overrides in block_jobs
                          if not completed_run(sweep_dir / folder)]
                if failed and self.config.retry_failed:
                    move_failed_aside(sweep_dir, [folder for folder, _ in failed])
                    returns += self.launch(failed)
        finally:
            record_elapsed(sweep_dir, process_started_at(), time.time())
        return returns

    def launch(self, jobs: list[Planned]) -> list[Sequence[JobReturn]]:
        """Run these (job folder, overrides), in batches of max_batch_size."""
        overrides = [o for _, o in jobs]
        returns = []
        for batch in (self.split_overrides_to_chunks(overrides, self.max_batch_size) if overrides else []):
            returns.append(self.launcher.launch(batch, initial_job_idx=self.jobs_launched))
            self.jobs_launched += len(batch)
        return returns

    def configurations(self, parsed: list[Override]) -> list[Job]:
        """The command line's configurations (its sweeps' product), named by their swept values (or strategy)."""
        if any(o.get_key_element() == "repeats" and o.is_sweep_override() for o in parsed):
            raise ConfigError("repeats cannot be swept: it is the number of blocks of the whole multirun")
        swept = {o.get_key_element() for o in parsed if o.is_sweep_override()}
        jobs = []
        for overrides in self.split_arguments(parsed, None)[0]:
            cfg = self.compose(overrides)
            named = [o for o in overrides if key_of(o) in swept] or [f"strategy={cfg.strategy.name}"]
            jobs.append(Job(job_name(named), [o for o in overrides if key_of(o) not in ("seed", "repeats")],
                            int(cfg.seed)))
        return unique_names(jobs)

    def shape_notice(self, jobs: list[Job]) -> list[str]:
        """Each configuration's shape lines once, naming those it holds for; none where jobs run elsewhere."""
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
        """The baselines the report needs and the sweep lacks, with plain overrides but NOT_SHARED; one process each."""
        baselines = []
        planned = self.planned(jobs)
        missing, not_shared = missing_baselines(planned), (*NOT_SHARED, *strategy_blocks(*planned))
        one_node = ["hydra.launcher.nodes=1"] if "nodes" in self.config.hydra.launcher else []
        for overrides, name in zip(missing, baseline_names(missing)):
            own = override_args(overrides)
            keys = {key_of(o) for o in own}
            shared = [o for o in plain if key_of(o) not in keys and not key_of(o).startswith(not_shared)]
            baselines.append(Job(name, shared + own + one_node, int(self.config.seed)))
        return unique_names(baselines)

    def planned(self, jobs: list[Job]) -> list[Run]:
        return [planned_run(container(cfg), strategy_class(cfg).is_baseline)
                for cfg in (self.compose(job.overrides) for job in jobs)]

    def controls(self, jobs: list[Job]) -> list[Job]:
        """The control arm: each equal-resource baseline once more in every block (arm=control)."""
        if not self.config.report.control:
            return []
        return [Job(f"{jobs[i].name}_control", [*jobs[i].overrides, f"arm={CONTROL}"], jobs[i].seed)
                for i in control_jobs(self.planned(jobs))]

    def design(self, jobs: list[Job], repeats: int | str) -> tuple[dict[str, Any], list[str]]:
        """What the sweep declares before its first run (metrics/report/design.py), and its first lines."""
        named = list(zip([job.name for job in jobs], self.planned(jobs)))
        results = ROOT / str(self.config.report.noise_results)
        fixed = repeats if isinstance(repeats, int) else None  # None: repeats=auto
        effect = float(self.config.report.smallest_effect)  # the equivalence margin the report reads from the plan
        earlier = sweep_noise_files(Path(self.config.hydra.sweep.dir))  # the noise its machine's sweeps measured
        needed, power_lines, powers = planned_blocks(named, results, effect, int(self.config.report.max_blocks), fixed,
                                                     fingerprint(), earlier)
        blocks = fixed or needed
        at_once = int(self.config.hydra.launcher.get("array_parallelism") or 1)  # SLURM: jobs of an array at once
        design = declaration(named, blocks) | {
            "smallest_effect": effect, "power": powers, "order": order_of(len(jobs), blocks, at_once), "repeats": self.config.repeats,
            "control": [job.name for job in jobs if f"arm={CONTROL}" in job.overrides]}
        lines = [f"avgbench: primary figure of {section}, fixed before the first run (the verdict ranks and claims on "
                 f"it alone): {from_dict(primary).text}" for section, primary in reversed(design["primary"].items())]
        order = design["order"]
        comparisons = sum(len(c) for c in design["comparisons"].values())
        lines.append(f"avgbench: {blocks} block{'s' if blocks > 1 else ''} of {len(jobs)} jobs"
                     + (f" (control arm: {', '.join(design['control'])})" if design["control"] else "")
                     + f", in a Williams order of {order['sequences']} sequences ("
                     + ("balanced" if order["balanced"] else
                        f"not balanced: a multiple of {order['sequences']} blocks would be")
                     + ("" if at_once == 1 else f"; not enforced: up to {at_once} jobs run at once, "
                                                "hydra.launcher.array_parallelism")
                     + f"); {comparisons} comparisons declared, Holm-corrected per (dataset, model)")
        return design, lines + power_lines

    def compose(self, overrides: list[str]) -> DictConfig:
        """The job's config, as the launcher will compose it, without the hydra node."""
        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(cfg):
            del cfg["hydra"]
        return cfg

    def job_folder(self, job: Job, block: int) -> str:
        """job_subdir up to the part holding {name} (below it, a run over several nodes has a folder per node)."""
        parts = self.job_subdir.split("/")
        upto = next((i for i, part in enumerate(parts) if "{name}" in part), len(parts) - 1)
        return "/".join(parts[:upto + 1]).replace("{block}", str(block)).replace("{name}", job.name)

    def job_overrides(self, job: Job, block: int, blocks: int, plan_id: str | None) -> list[str]:
        subdir = re.sub(r"\{env:([^}]*)\}", r"${oc.env:\1}",  # resolved by the job, e.g. on its node
                        self.job_subdir.replace("{block}", str(block)).replace("{name}", job.name))
        return [*job.overrides, f"seed={job.seed + block}", f"block={block}", f"repeats={blocks}",
                f"plan={plan_id or 'null'}", f"hydra.sweep.subdir='{subdir}'"]

    def resume(self, sweep_dir: Path, planned: list[Planned],
               aside: Path) -> tuple[list[Planned], list[str], dict[str, str]]:
        """Of the planned (job folder, overrides): those to run, the job directories kept, and those moved aside."""
        to_run: list[Planned] = []
        kept: list[str] = []
        moved: dict[str, str] = {}
        for folder, overrides in planned:
            job_dir = sweep_dir / folder
            if not job_dir.exists():
                to_run.append((folder, overrides))
                continue
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
            nodes = cfg.hydra.launcher.get("nodes")
            with open_dict(cfg):
                del cfg["hydra"]
            if completed_with(job_dir, cfg, nodes):
                kept.append(str(job_dir.relative_to(sweep_dir)))
                continue
            target = aside / job_dir.relative_to(sweep_dir)
            move_aside(job_dir, target)
            moved[job_dir.relative_to(sweep_dir).as_posix()] = target.relative_to(sweep_dir).as_posix()
            print(f"avgbench: {job_dir} did not complete with this configuration: moved to {target}, running it "
                  "again in its block", flush=True)
            to_run.append((folder, overrides))
        return to_run, kept, moved


def completed_run(job_dir: Path) -> Run | None:
    """The completed run the job directory holds (every node's summary read as one run), else None."""
    folders = run_folders(run_dirs_under(job_dir)).get(job_dir)
    try:
        run = load(job_dir, folders) if folders else None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return run if run is not None and run.completed else None


def completed_with(job_dir: Path, cfg: DictConfig, nodes: int | None = None) -> bool:
    """A completed run of this config (on `nodes` nodes) with FROM_THE_NODE and RERUN_FREE values aside."""
    run = completed_run(job_dir)
    if run is None or (nodes is not None and run.nnodes != nodes):
        return False
    config = container(cfg)
    config["device"] = resolve_device(config["device"])
    free = RERUN_FREE + tuple(key for key, value in flatten(container(cfg, resolve=False)).items()
                              if isinstance(value, str) and FROM_THE_NODE in value)
    same = lambda flat: {k: v for k, v in flat.items() if not k.startswith(free)}  # noqa: E731
    return same(flatten(run.config)) == same(flatten(config))


def move_failed_aside(sweep_dir: Path, failed: list[str]) -> None:
    """Move each failed job folder into SWEEP_DIR/superseded/<time>_retry/ and list it among the plan's reruns."""
    aside = sweep_dir / SUPERSEDED / (time.strftime("%Y-%m-%d_%H-%M-%S") + "_retry")
    for folder in failed:
        move_aside(sweep_dir / folder, aside / folder)
        print(f"avgbench: {sweep_dir / folder} failed: moved to {aside / folder}, running it once more in its block",
              flush=True)
    plan = read_plan(sweep_dir)
    plan["reruns"] = with_reruns(plan.get("reruns"), {f: (aside / f).relative_to(sweep_dir).as_posix() for f in failed})
    (sweep_dir / SWEEP_PLAN).write_text(json.dumps(plan, indent=1))


def record_elapsed(sweep_dir: Path, started_at: float, ended_at: float) -> None:
    """Add this command's span, its start to its last job's end, to the plan's `elapsed` (docs/report.md)."""
    plan = read_plan(sweep_dir)
    plan["elapsed"] = [*plan.get("elapsed", []), {"started_at": started_at, "ended_at": ended_at}]
    (sweep_dir / SWEEP_PLAN).write_text(json.dumps(plan, indent=1))


def with_reruns(reruns: list[dict[str, Any]] | None, moved: dict[str, str]) -> list[dict[str, Any]]:
    """The plan's reruns (job, its earlier attempts) with these moved job folders (job -> where) added."""
    attempts = {entry["job"]: entry["attempts"] for entry in reruns or []}
    for job, where in moved.items():
        attempts[job] = [*attempts.get(job, []), where]
    return [{"job": job, "attempts": found} for job, found in attempts.items()]


def move_aside(path: Path, target: Path) -> None:
    """Keep what an earlier attempt wrote, out of the way (never deleted)."""
    if path.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        path.rename(target)


def changes(first: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The DECLARED keys in which `now` differs from `first` (the primary figure's `declared` aside)."""
    def declared(plan: dict[str, Any], key: str) -> str:
        found = plan.get(key)
        if key == "primary":
            found = {section: {k: v for k, v in p.items() if k != "declared"} for section, p in (found or {}).items()}
        return json.dumps(found, sort_keys=True)
    return [key for key in DECLARED if declared(first, key) != declared(now, key)]


def write_plan(sweep_dir: Path, planned: list[list[str]], kept: list[str], design: dict[str, Any],
               order: list[tuple[int, int, str]], moved: dict[str, str], earlier: dict[str, Any],
               plan_id: str | None = None) -> dict[str, Any]:
    """Write and return the sweep's plan: id, jobs in start order and Williams sequence, the design declared (an
    earlier plan's where its runs are kept: a change is recorded, not adopted) and the reruns."""
    sequences = design["order"]["sequences"]
    plan = {"id": plan_id, "jobs": planned, "kept": kept, "to_run": len(planned) - len(kept),
            "order": [{"block": block, "position": position, "sequence": block % sequences, "job": folder}
                      for block, position, folder in order],
            "declaration": design}
    first = earlier.get("declaration")
    if kept and first:
        plan["declaration"] = first
        changed = changes(first, design)
        if changed or earlier.get("changed"):
            plan["changed"] = earlier.get("changed") or (
                f"this sweep's plan differs from the one its first runs were made under in {', '.join(changed)}")
            plan["redeclared"] = design
    elif kept:
        plan["first_runs_undeclared"] = True
    plan["reruns"] = with_reruns(earlier.get("reruns"), moved)
    plan["elapsed"] = earlier.get("elapsed", [])
    path = sweep_dir / SWEEP_PLAN
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan, indent=1))
    return plan


def planned_jobs(sweep_dir: str | Path) -> int | None:
    """How many jobs this invocation of the sweep runs (the plan's count, kept runs excluded)."""
    try:
        return json.loads((Path(sweep_dir) / SWEEP_PLAN).read_text())["to_run"]
    except (OSError, ValueError, KeyError):
        return None


def key_of(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def job_name(overrides: list[str]) -> str:
    """key=value,key=value of the swept overrides, as a directory name."""
    return re.sub(r"[^A-Za-z0-9._=,+-]", "_", ",".join(o.lstrip("+~") for o in overrides))


def baseline_names(missing: list[dict[str, Any]]) -> list[str]:
    """baseline_<peers>x<cpus> for each baseline, then the settings in which baselines differ (e.g. _optim-adamw)."""
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
