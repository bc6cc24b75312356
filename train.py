#!/usr/bin/env python
"""avgbench: train ResNet18 under one averaging strategy and measure it.

    python train.py strategy=hivemind peers=8
    python train.py -m strategy=ring,stepwise,ps     # then a comparison report"""
import copy
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from job.device import resolve_device
from job.errors import BackendUnavailable, ConfigError
from job.process import exit_now, interrupt_on_signals
from launchers import launch
from launchers.base import Outcome
from launchers.config import check_command, check_overrides, container, validate
from launchers.hydra_internals import get_args_parser
from launchers.lock import SWEEP_LOCK, take_sweep_lock
from launchers.lock import status as lock_status
from launchers.shape import peers_from_default, shape_lines, shape_of
from launchers.sweep import JOBS
from metrics.recording.rundir import RunDir
from metrics.summary.bounds import LinkBound
from metrics.summary.build import LaunchFacts, StrategyFacts, write_summary
from metrics.summary.schema import Summary
from metrics.summary.wall import LaunchClock
from metrics.summary.window import window_steps
from netemu.auto import link_line
from netemu.cpu import emulate_of
from netemu.dilation import checked_dilation, dilate


def fail_input(message: str) -> NoReturn:
    print(f"avgbench: error: {message}", file=sys.stderr)
    sys.exit(2)


def run(cfg: DictConfig) -> int:
    """Launch one run, wait for it, write summary.json; returns the exit code."""
    run_at = time.time()
    config = copy.deepcopy(cfg)  # the run's; cfg stays as asked
    try:
        strategy, checked_spec, model, link = validate(config, choose_network=True)
    except (ConfigError, BackendUnavailable) as exc:
        fail_input(str(exc))
    run = RunDir(Path(HydraConfig.get().runtime.output_dir).resolve())
    if run.run_id.exists():
        fail_input(f"{run.path} already holds a run ({run.run_id}); its metrics would mix with this one's. "
                   "Choose a new hydra.run.dir or remove that directory")
    JOBS.started += 1
    run.config.parent.mkdir(parents=True, exist_ok=True)
    dilated = finish_config(run, config)
    asked = container(cfg) | {"device": config.device}  # as asked: before dilation, network=auto; device resolved
    spec = strategy.launch_spec(config) if dilated else checked_spec  # dilated: so are the launcher's timeouts
    shape = shape_of(config, spec, peers_from_default(cfg))
    assert link is not None  # validate chose it
    link.write(run.link)
    for line in filter(None, [link_line(link, shape), *shape_lines(shape)]):
        print(line, flush=True)
    lock = take_machine_lock(config.lock)
    OmegaConf.save(config, run.config, resolve=True)
    spec.save(run)
    window = window_steps(config.measure_window.after_step, config.measure_window.steps,
                          strategy.averaging_period(config))
    launcher = launch(config, run, spec)
    run.run_id.write_text(launcher.run_id)
    outcome = launcher.run(window)
    strategy.after_run(config, run)
    for peer in run.peers():  # a killed peer could not delete the weights it saved for evaluation
        shutil.rmtree(peer.snapshots, ignore_errors=True)
    torn_down_at = time.time()
    knobs = strategy.knobs(config)
    link_bound = LinkBound(knobs, model.link_bound, model.bound_formula(), model.rounds_overlap(knobs))
    facts = StrategyFacts(link_bound, strategy.is_baseline, strategy.failure_counters, strategy.lockstep(config))
    clock = LaunchClock(JOBS.ended_at, run_at, launcher.peers_started_at, torn_down_at)
    summary = write_summary(run, asked, outcome, facts, LaunchFacts(shape, lock, window, clock))
    print_result(run.path, summary, outcome, (*strategy.summed_counters, *strategy.failure_counters))
    JOBS.failed.pop(str(run.path), None)  # an attempt that failed, retried in its block (launchers/sweeper.py)
    if outcome.exit_code:
        JOBS.failed[str(run.path)] = outcome.exit_code
    JOBS.ended_at = time.time()
    return outcome.exit_code


def take_machine_lock(mode: str) -> dict[str, Any]:
    """A multirun takes the machine lock, a single run only looks; returns its status for the summary."""
    if HydraConfig.get().mode == RunMode.MULTIRUN:
        take_sweep_lock(mode)  # taken by the sweeper already, unless another sweeper ran this job
    lock = lock_status(mode)
    if lock["holder"] and not lock["under_lock"]:
        print(f"avgbench: the machine lock is held by pid {lock['holder']['pid']} ({lock['holder']['command']}): "
              "this run shares the machine with it (summary.json: machine)", file=sys.stderr, flush=True)
    return lock


def finish_config(run: RunDir, cfg: DictConfig) -> bool:
    """The run's config made final in place, before the peers read it: its device resolved (not "auto") and dilated
    once (what changed and the factor checked: run.dilation); whether dilation changed it."""
    cfg.device = resolve_device(cfg.device)
    factor = emulate_of(cfg)["dilation"]
    checked, source = checked_dilation(cfg.strategy.name) if factor != 1 else (1.0, "not dilated")
    scaled = dilate(cfg, factor)
    run.dilation.write_text(json.dumps({"factor": factor, "checked_up_to": checked, "checked_by": source,
                                        "unchecked": factor > checked, "scaled": scaled}, indent=1))
    return bool(scaled)


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
        if exc.code == 1 and JOBS.started == 0:
            sys.exit(2)  # Hydra rejected the command line or config before any run started
        raise
    finally:
        SWEEP_LOCK.release()  # after the sweep's baselines and report (the Hydra callback)
    if JOBS.failed:
        print(f"avgbench: {len(JOBS.failed)} run(s) failed: {', '.join(JOBS.failed)}", file=sys.stderr)
        sys.exit(1)
    if JOBS.report_errors:
        sys.exit(1)  # the callback has printed why
    exit_now(0)


if __name__ == "__main__":
    main()
