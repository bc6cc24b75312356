#!/usr/bin/env python
"""avgbench: train ResNet18 under one averaging strategy and measure it.

    python train.py strategy=hivemind peers=8
    python train.py -m strategy=ring,stepwise,ps     # then a comparison report
"""
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from job.config import check_overrides, validate
from job.errors import BackendUnavailable, ConfigError
from job.process import interrupt_on_signals
from job.worker import CONFIG_PATH, RUN_ID_PATH
from launchers import get_launcher
from metrics.report import report_errors
from metrics.summary import write_summary
from strategies import get_strategy

failed_jobs: list[str] = []
jobs_started = 0


def fail_input(message: str) -> None:
    print(f"avgbench: error: {message}", file=sys.stderr)
    sys.exit(2)


def run(cfg) -> int:
    """Launch one run, wait for it, write summary.json; returns the exit code."""
    global jobs_started
    try:
        validate(cfg)
    except (ConfigError, BackendUnavailable) as exc:
        fail_input(str(exc))
    run_dir = Path(HydraConfig.get().runtime.output_dir).resolve()
    if (run_dir / RUN_ID_PATH).exists():
        fail_input(f"{run_dir} already holds a run ({RUN_ID_PATH}); its metrics would mix with this one's. "
                   "Choose a new hydra.run.dir or remove that directory")
    jobs_started += 1
    (run_dir / CONFIG_PATH).parent.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, run_dir / CONFIG_PATH, resolve=True)

    strategy = get_strategy(cfg.strategy.name)
    launcher = get_launcher(strategy.launcher(cfg))(
        cfg, run_dir, strategy.num_processes(cfg), tolerate_peer_loss=strategy.tolerates_peer_loss(cfg)
    )
    (run_dir / RUN_ID_PATH).write_text(launcher.run_id)
    outcome = launcher.run()
    strategy.after_run(cfg, run_dir)
    summary = write_summary(run_dir, OmegaConf.to_container(cfg, resolve=True), outcome, strategy.knobs(cfg))
    print_result(run_dir, summary, outcome)
    if outcome.exit_code:
        failed_jobs.append(str(run_dir))
    return outcome.exit_code


def print_result(run_dir: Path, summary: dict, outcome) -> None:
    if outcome.status == "completed":
        rate = summary["throughput_samples_per_s"]
        acc = summary["final_test_accuracy"]
        print(f"avgbench: {summary['config']['strategy']['name']} x{summary['config']['peers']} done in "
              f"{outcome.wall_s:.1f} s: {rate or 0:.1f} samples/s, test accuracy "
              f"{acc if acc is None else f'{acc:.3f}'}; results in {run_dir}")
        if outcome.lost_peers:
            print(f"avgbench: peers lost during the run: {outcome.lost_peers}")
    else:
        print(f"avgbench: run {outcome.status}: {outcome.error}", file=sys.stderr)
        print(f"avgbench: metrics so far are in {run_dir}", file=sys.stderr)


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def hydra_main(cfg) -> None:
    code = run(cfg)
    interrupted = code > 128  # Ctrl-C or SIGTERM also ends a sweep
    if code and (interrupted or HydraConfig.get().mode.name != "MULTIRUN"):
        sys.exit(code)


def main() -> None:
    interrupt_on_signals()
    try:
        check_overrides(sys.argv[1:])
    except ConfigError as exc:
        fail_input(str(exc))
    try:
        hydra_main()
    except SystemExit as exc:
        if exc.code == 1 and jobs_started == 0:
            sys.exit(2)  # Hydra rejected the command line or config before any run started
        raise
    if failed_jobs:
        print(f"avgbench: {len(failed_jobs)} run(s) failed: {', '.join(failed_jobs)}", file=sys.stderr)
        sys.exit(1)
    if report_errors:
        sys.exit(1)  # the callback has printed why


if __name__ == "__main__":
    main()
