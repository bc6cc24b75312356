"""The end of a multirun (hydra.callbacks.report in conf/config.yaml): the comparison report in the sweep directory."""
import sys
import traceback
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from launchers.config import project_targets
from metrics.report import announce, build_report, report_errors


class SweepReport(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            project = project_targets(OmegaConf.select(config, "report.project"),
                                      list(OmegaConf.select(config, "hydra.overrides.task", default=[])))
            report, paths = build_report([sweep_dir], sweep_dir, project)
        except Exception as exc:  # the multirun's results stay; the exit code says the report failed
            report_errors.append(f"{sweep_dir}: {exc}")
            print(f"avgbench: error: comparison report for {sweep_dir} failed: {exc}\n{traceback.format_exc()}",
                  file=sys.stderr)
            return
        announce(report, paths)
