"""The report's plots (unit tier): what each draws, read back from the figure before it becomes a PNG."""
from pathlib import Path

import pytest

from metrics.report import plots
from metrics.report.runs import Group, PeerLogs, Run, Section
from metrics.summary.schema import Summary

pytestmark = pytest.mark.timeout(60)


def run_of(seconds_per_step: float, steps: int) -> Run:
    """One worker of 32 samples a step, evaluated every 10 steps, on a machine of this speed."""
    logs = [{"step": n, "train_s": seconds_per_step * n, "samples": 32 * n, "loss": 1.0 / n}
            for n in range(1, steps + 1)]
    evals = [{"step": n, "train_s": seconds_per_step * n, "samples": 32 * n, "test_accuracy": n / steps}
             for n in range(10, steps + 1, 10)]
    return Run(Path(f"run{seconds_per_step}"), Summary.from_dict({"config": {}}), [PeerLogs(0, logs, evals, [])])


def test_every_line_of_the_convergence_plot_runs_forward_in_time(monkeypatch):
    """Two repeats of one configuration: a contended one, 0.8 s a step, stopped at its target at step 20 (16 s), and
    one alone, 0.25 s a step, to step 40 (10 s). No drawn line goes back in time."""
    drawn = []
    monkeypatch.setattr(plots, "to_png", drawn.append)
    plots.convergence_plot(Section("digits", "tiny", [Group([run_of(0.8, 20), run_of(0.25, 40)], label="single")]))
    lines = [line for ax in drawn[0].axes for line in ax.get_lines()]
    assert lines
    for line in lines:
        x = list(line.get_xdata())
        assert x == sorted(x), x
