"""The end of a multirun (hydra.callbacks.report in conf/config.yaml): the comparison report in the sweep directory."""
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from job.process import process_started_at
from launchers.config import project_targets
from metrics.report import announce, build_report


@dataclass
class Jobs:
    """This command's jobs, for its exit status (Hydra calls the task function once a job, then SweepReport)."""
    started: int = 0
    failed: dict[str, int] = field(default_factory=dict)  # run directory -> its exit code
    report_errors: list[str] = field(default_factory=list)  # comparison reports that failed
    ended_at: float = field(default_factory=process_started_at)  # where the next job's wall phases start


JOBS = Jobs()


class SweepReport(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            project = project_targets(OmegaConf.select(config, "report.project"),
                                      list(OmegaConf.select(config, "hydra.overrides.task", default=[])))
            report, paths = build_report([sweep_dir], sweep_dir, project)
        except Exception as exc:  # the multirun's results stay; the exit code says the report failed
            JOBS.report_errors.append(f"{sweep_dir}: {exc}")
            print(f"avgbench: error: comparison report for {sweep_dir} failed: {exc}\n{traceback.format_exc()}",
                  file=sys.stderr)
            return
        announce(report, paths)
