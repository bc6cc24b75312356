"""The end of a multirun: run the equal-resource baselines the sweep lacks, then the comparison report.

Every multi-peer run is compared with baselines of the same resources (metrics.report_data:
`strategy=single` with the same peers and peer_cpus, and one peer with peer_cpus for scaling
efficiency). Those the sweep lacks are run here, into SWEEP_DIR/baseline_<peers>x<cpus> (followed by
the settings that tell baselines of one shape apart, e.g. _optim-adamw), unless `report.baselines=off`.
Hydra calls this (hydra.callbacks.report in conf/config.yaml).
"""
import subprocess
import sys
import traceback
from pathlib import Path

from hydra.experimental.callback import Callback

from metrics.report import build_report, report_errors
from metrics.report_data import find_runs, load_run, missing_baselines

ROOT = Path(__file__).resolve().parent.parent


def baseline_names(missing: list[dict]) -> list[str]:
    """baseline_<peers>x<cpus> for each baseline's overrides, followed by the settings in which baselines differ
    (e.g. _optim-adamw; "=" would not parse as a Hydra override), so that two of one shape get two directories."""
    apart = [k for k in dict.fromkeys(k for o in missing for k in o)
             if k not in ("peers", "peer_cpus") and len({str(o.get(k)) for o in missing}) > 1]
    return ["".join([f"baseline_{o['peers']}x{o['peer_cpus']}", *(f"_{k}-{o[k]}" for k in apart if k in o)])
            for o in missing]


def run_baselines(sweep_dir: Path) -> None:
    runs = [load_run(path) for path in find_runs([sweep_dir])[0]]
    missing = missing_baselines(runs)
    for overrides, name in zip(missing, baseline_names(missing)):
        run_dir = sweep_dir / name
        command = [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run_dir}",
                   *(f"{key}={value}" for key, value in overrides.items())]
        print(f"avgbench: equal-resource baseline for the report: {' '.join(command[1:])}", flush=True)
        done = subprocess.run(command, cwd=ROOT, stdin=subprocess.DEVNULL)
        if done.returncode:
            print(f"avgbench: baseline {run_dir.name} failed (exit {done.returncode}); the report says what is "
                  "missing", file=sys.stderr)


class SweepReport(Callback):
    def on_multirun_end(self, config, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            if config.get("report", {}).get("baselines", "auto") == "auto":
                run_baselines(sweep_dir)
            paths = build_report([sweep_dir], sweep_dir)
        except Exception as exc:  # the multirun's results stay; the exit code says the report failed
            report_errors.append(f"{sweep_dir}: {exc}")
            print(f"avgbench: error: comparison report for {sweep_dir} failed: {exc}\n{traceback.format_exc()}",
                  file=sys.stderr)
            return
        print(f"avgbench: comparison report: {paths['html']} (also report.md, runs.csv)")
