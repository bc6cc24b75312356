#!/usr/bin/env python
"""avgbench: train ResNet18 under one averaging strategy and measure it.

    python train.py strategy=hivemind peers=8
    python train.py -m strategy=ring,stepwise,ps     # then a comparison report"""
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any, NoReturn, cast

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from job.device import resolve_device
from job.errors import BackendUnavailable, ConfigError
from job.process import exit_now, interrupt_on_signals, process_started_at
from launchers import launch
from launchers.base import Outcome
from launchers.config import check_command, check_overrides, measurement_window, strategy_class, validate
from launchers.hydra_internals import get_args_parser
from launchers.lock import SWEEP_LOCK, take_sweep_lock
from launchers.lock import status as lock_status
from launchers.shape import peers_from_default, shape_lines, shape_of
from metrics.projection.models import cost_model
from metrics.report import report_errors
from metrics.recording.rundir import RunDir
from metrics.summary.bounds import LinkBound
from metrics.summary.build import LaunchFacts, StrategyFacts, write_summary
from metrics.summary.schema import Summary
from metrics.summary.wall import LaunchClock
from netemu.auto import LinkChoice, choose_link, link_line
from netemu.cpu import emulate_of
from netemu.dilation import checked_dilation, dilate

failed_jobs: list[str] = []
jobs_started = 0
job_started_at = process_started_at()  # where the next job's wall phases start: the command's start, then a job's end


def fail_input(message: str) -> NoReturn:
    print(f"avgbench: error: {message}", file=sys.stderr)
    sys.exit(2)


def run(cfg: DictConfig) -> int:
    """Launch one run, wait for it, write summary.json; returns the exit code."""
    global jobs_started, job_started_at
    run_at = time.time()
    try:
        validate(cfg)
    except (ConfigError, BackendUnavailable) as exc:
        fail_input(str(exc))
    run = RunDir(Path(HydraConfig.get().runtime.output_dir).resolve())
    if run.run_id.exists():
        fail_input(f"{run.path} already holds a run ({run.run_id}); its metrics would mix with this one's. "
                   "Choose a new hydra.run.dir or remove that directory")
    jobs_started += 1
    peers_default = peers_from_default(cfg)
    cfg.device = resolve_device(cfg.device)  # peers and the summary see where they train, not "auto"
    strategy = strategy_class(cfg)
    run.config.parent.mkdir(parents=True, exist_ok=True)
    asked = cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=True))  # as asked: before dilation, network=auto
    link = choose_network(cfg, strategy.launch_spec(cfg).processes)
    record_dilation(run, cfg)
    spec = strategy.launch_spec(cfg)
    shape = shape_of(cfg, spec, peers_default)
    link.write(run.link)
    for line in filter(None, [link_line(link, shape), *shape_lines(shape)]):
        print(line, flush=True)
    lock = take_machine_lock(cfg.lock)
    OmegaConf.save(cfg, run.config, resolve=True)
    spec.save(run)

    launcher = launch(cfg, run, spec)
    run.run_id.write_text(launcher.run_id)
    outcome = launcher.run()
    strategy.after_run(cfg, run)
    for peer in run.peers():  # a killed peer could not delete the weights it saved for evaluation
        shutil.rmtree(peer.snapshots, ignore_errors=True)
    torn_down_at = time.time()
    knobs = strategy.knobs(cfg)
    model = cost_model(cfg.strategy)
    link_bound = LinkBound(knobs, model.link_bound, model.bound_formula(), model.rounds_overlap(knobs))
    facts = StrategyFacts(link_bound, strategy.is_baseline, strategy.failure_counters, strategy.lockstep(cfg))
    clock = LaunchClock(job_started_at, run_at, launcher.peers_started_at, torn_down_at)
    summary = write_summary(run, asked, outcome, facts, LaunchFacts(shape, lock, measurement_window(cfg), clock))
    print_result(run.path, summary, outcome, (*strategy.summed_counters, *strategy.failure_counters))
    if str(run.path) in failed_jobs:  # an attempt that failed, retried in its block (launchers/sweeper.py)
        failed_jobs.remove(str(run.path))
    if outcome.exit_code:
        failed_jobs.append(str(run.path))
    job_started_at = time.time()
    return outcome.exit_code


def choose_network(cfg: DictConfig, processes: int) -> LinkChoice:
    """The link the run measures (network=auto resolved in cfg, as its rates were asked: before dilation)."""
    try:
        link = choose_link(cfg, processes, int(cfg.launch.nnodes))
        validate(cfg)  # what network=auto chose, as if asked for (a strategy may need knobs for it)
    except (ConfigError, BackendUnavailable) as exc:
        fail_input(str(exc))
    return link


def take_machine_lock(mode: str) -> dict[str, Any]:
    """A multirun takes the machine lock, a single run only looks; returns its status for the summary."""
    if HydraConfig.get().mode == RunMode.MULTIRUN:
        take_sweep_lock(mode)  # taken by the sweeper already, unless another sweeper ran this job
    lock = lock_status(mode)
    if lock["holder"] and not lock["under_lock"]:
        print(f"avgbench: the machine lock is held by pid {lock['holder']['pid']} ({lock['holder']['command']}): "
              "this run shares the machine with it (summary.json: machine)", file=sys.stderr, flush=True)
    return lock


def record_dilation(run: RunDir, cfg: DictConfig) -> None:
    """Dilate the config once, before the peers read it, and record what changed and the factor checked."""
    factor = emulate_of(cfg)["dilation"]
    checked, source = checked_dilation(cfg.strategy.name) if factor != 1 else (1.0, "not dilated")
    run.dilation.write_text(json.dumps({"factor": factor, "checked_up_to": checked, "checked_by": source,
                                        "unchecked": factor > checked, "scaled": dilate(cfg, factor)}, indent=1))


def print_result(run_dir: Path, summary: Summary, outcome: Outcome, counted: tuple[str, ...]) -> None:
    """What the run measured, in a few lines; `counted`: the strategy's counters summed over peers."""
    if outcome.status != "completed":
        print(f"avgbench: run {outcome.status}: {outcome.error}", file=sys.stderr)
        print(f"avgbench: metrics so far are in {run_dir}", file=sys.stderr)
        return
    config, accuracy, ttt = summary.config, summary.accuracy_by_worker, summary.time_to_target_s
    print(f"avgbench: {config['strategy']['name']} x{config['peers']} done in {outcome.wall_s:.1f} s: "
          f"{summary.throughput_samples_per_s or 0:.1f} samples/s; test accuracy worst "
          f"{fmt(accuracy.worst)} (mean {fmt(accuracy.mean)}, best {fmt(accuracy.best)}); "
          f"time to {config['target']['metric']} {config['target']['value']}: "
          f"{'not reached' if ttt is None else f'{ttt:.1f} s'}")
    print(f"avgbench: step time: {' '.join(f'{k[:-2]} {v:.0%}' for k, v in summary.time_breakdown_share.items())} "
          f"(comm = exposed communication); payload {(summary.bytes_sent_per_sample or 0) / 1024:.1f} KiB "
          f"sent per sample")
    figures = [(peer.result or {}).get("strategy") or {} for peer in summary.peers]
    counters = {key: sum(f.get(key) or 0 for f in figures) for key in dict.fromkeys(counted)}
    shown = {k: v for k, v in counters.items() if v or k in summary.failure_counters}
    if shown:
        print("avgbench: summed over peers: " + ", ".join(f"{k} {v}" for k, v in shown.items()))
    if outcome.lost_peers:
        print(f"avgbench: peers lost during the run: {outcome.lost_peers}")
    if summary.link.faithful is False:
        print(f"avgbench: link not faithful (link in summary.json): {summary.link.reason}")
    if summary.isolation.faithful is False:
        print(f"avgbench: emulation not faithful (isolation in summary.json): "
              f"{'; '.join(summary.isolation.unfaithful)}")
    print(f"avgbench: results in {run_dir}")


def fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def hydra_main(cfg: DictConfig) -> None:
    code = run(cfg)
    interrupted = code > 128  # Ctrl-C or SIGTERM also ends a sweep
    if code and (interrupted or HydraConfig.get().mode != RunMode.MULTIRUN):
        sys.exit(code)


def main() -> None:
    interrupt_on_signals()
    args = get_args_parser().parse_args(sys.argv[1:])
    try:
        if (args.multirun or args.help or args.hydra_help or args.info or args.shell_completion or args.config_name
                or args.config_path or args.config_dir):
            check_overrides(args.overrides)  # a sweep validates each job as it runs it (unknown keys: not yet)
        else:
            check_command(args.overrides)  # a run, and --cfg: the config it would run
    except (ConfigError, BackendUnavailable) as exc:
        fail_input(str(exc))
    try:
        hydra_main()
    except SystemExit as exc:
        if exc.code == 1 and jobs_started == 0:
            sys.exit(2)  # Hydra rejected the command line or config before any run started
        raise
    finally:
        SWEEP_LOCK.release()  # after the sweep's baselines and report (the Hydra callback)
    if failed_jobs:
        print(f"avgbench: {len(failed_jobs)} run(s) failed: {', '.join(failed_jobs)}", file=sys.stderr)
        sys.exit(1)
    if report_errors:
        sys.exit(1)  # the callback has printed why
    exit_now(0)


if __name__ == "__main__":
    main()
