"""Where a run's wall time goes (summary.json wall_phases_s) and the sweep efficiency, on summaries written by hand
(the phases of a real run: tests/integration/test_training.py)."""
import html

import pytest

from helpers import report_of, write_sweep
from metrics.report.baselines import load_runs
from metrics.summary.schema import Summary

PHASES = {"command_s": 3.0, "launch_s": 1.0, "imports_s": 4.0, "training_s": 20.0, "precise_bn_s": 5.0,
          "other_s": 0.5}


def test_the_sweep_efficiency_counts_training_to_the_target_or_the_horizon_in_the_seconds_each_run_spent(tmp_path):
    """60 s + the longest worker's 100 s + 2 x 30 s (the dilated run's summary is in its emulated cluster's time), /
    400 s elapsed over two commands: one figure for the report and bench/headline.py."""
    from bench.headline import efficiency_of

    missed = {"summary": {"peers": [{"rank": 0, "train_s": 90.0}, {"rank": 1, "train_s": 100.0}]}}
    sweep = write_sweep(tmp_path / "sweep", {
        "strategy=ring": [("ring", 2, 1, 50.0, 60.0, {})],
        "baseline_2x1": [("single", 2, 1, 40.0, None, missed)],
        "strategy=ps": [("ps", 2, 1, 100.0, 30.0, {"summary": {"isolation": {"dilation": 2}}})],
    }, plan={"elapsed": [{"started_at": 1000.0, "ended_at": 1300.0}, {"started_at": 2000.0, "ended_at": 2100.0}]})
    runs = [run for section in load_runs([sweep])[0] for run in section.runs]
    assert efficiency_of(runs) == {"value": pytest.approx(220 / 400), "elapsed_s": 400.0, "goal": 0.85,
                                   "goal_met": False}
    assert "Sweep efficiency 0.55:" in report_of(sweep, out=tmp_path / "out")


def test_the_report_shows_the_wall_phases_and_the_sweeps_efficiency(tmp_path):
    with_phases = {"summary": {"wall_phases_s": PHASES, "peers": [{"rank": 0, "train_s": 40.0}]}}
    sweep = write_sweep(tmp_path / "sweep", {
        "strategy=ring": [("ring", 2, 1, 100.0, 20.0, with_phases)],  # reached the target after 20 s of training
        "baseline_2x1": [("single", 2, 1, 100.0, None, with_phases)],  # missed it: its horizon, 40 s
    }, plan={"elapsed": [{"started_at": 1000.0, "ended_at": 1060.0}, {"started_at": 2000.0, "ended_at": 2040.0}]})
    markdown = report_of(sweep, out=tmp_path / "out")
    assert "Sweep efficiency 0.60:" in markdown and "60 s, / the sweep's elapsed time, 100 s" in markdown
    assert "| ring | 1 | 33.5 | 20 (59.7 %) | precise bn 5, imports 4, command 3 |" in markdown
    page = html.unescape((tmp_path / "out" / "report.html").read_text())
    assert "<h3>Where the wall time went</h3><img" in page


def test_summaries_without_wall_phases_still_load_and_report(tmp_path):
    sweep = write_sweep(tmp_path / "sweep", {"strategy=ring": [("ring", 2, 1, 100.0, 20.0, {})],
                                             "baseline_2x1": [("single", 2, 1, 100.0, None, {})]})
    assert not Summary.load(sweep / "block0" / "strategy=ring").wall_phases_s
    markdown = report_of(sweep, out=tmp_path / "out")
    assert "Time, throughput and convergence" in markdown
    assert "Where the wall time went" not in markdown and "Sweep efficiency" not in markdown


def test_a_run_over_two_nodes_spans_from_the_earliest_start_with_the_phases_of_the_node_that_ended_last(tmp_path):
    """Node 0's job starts at 1000 s, its launcher ends at 1031 s and its summary at 1034 s; node 1's job starts at
    1010 s, ends at 1039 s (last) and its summary at 1040.5 s. The run: 1000 s to 1040.5 s, node 1's phases."""
    from metrics.summary.build import merge_nodes

    first = {"command_s": 3.0, "launch_s": 2.0, "imports_s": 4.0, "training_s": 20.0, "other_s": 1.0, "exit_s": 1.0,
             "teardown_s": 2.0, "summary_s": 1.0}
    last = {"command_s": 2.0, "launch_s": 1.0, "imports_s": 3.0, "training_s": 22.0, "other_s": 0.5, "exit_s": 0.5,
            "teardown_s": 1.0, "summary_s": 0.5}
    target = {"metric": "test_accuracy", "value": 0.9}
    nodes = [Summary.from_dict({"status": "completed", "started_at": 1003.0, "wall_s": 28.0, "wall_phases_s": first,
                                "target": target}),
             Summary.from_dict({"status": "completed", "started_at": 1012.0, "wall_s": 27.0, "wall_phases_s": last,
                                "target": target})]
    paths = [tmp_path / "node0", tmp_path / "node1"]
    merged = merge_nodes(paths, nodes, [0, 1], []).wall_phases_s.seconds()
    assert sum(merged.values()) == pytest.approx(1040.5 - 1000.0)
    assert {k: v for k, v in merged.items() if v} == last | {"other_s": pytest.approx(0.5 + 10.0)}
