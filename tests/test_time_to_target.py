"""Time-to-target from hand-made evaluation logs (unit tier): the crossing is interpolated between
the last evaluation below the target and the first at or above it, must hold at the next evaluation,
and splits into all workers' samples-to-target x time per sample."""
import json

import pytest

from metrics.rundir import RunDir
from metrics.summary import build_summary
from test_summary import config, outcome, write_lines

pytestmark = pytest.mark.timeout(30)

BATCH = 32


def steps(count: int, step_s: float) -> list[dict]:
    return [{"step": n, "wall_s": n * step_s, "train_s": n * step_s, "samples": BATCH * n, "loss": 1.0,
             "data_s": 0.0, "compute_s": step_s, "comm_s": 0.0, "opt_s": 0.0, "bytes_sent": 0, "bytes_recv": 0,
             "round": None} for n in range(1, count + 1)]


def evals(curve: dict[int, float], step_s: float, metric: str = "test_accuracy") -> list[dict]:
    """One evaluation per (step: value); train_s and samples as a worker of `steps(.., step_s)` has them."""
    other = "test_loss" if metric == "test_accuracy" else "test_accuracy"
    return [{"step": n, "wall_s": n * step_s, "train_s": n * step_s, "samples": BATCH * n, metric: value,
             other: 0.5, "test_samples": 359, "eval_s": 1.0} for n, value in curve.items()]


def summary_of(tmp_path, curves: list[dict[int, float]], step_s: list[float], target: float,
               metric: str = "test_accuracy", eval_every: int = 5) -> dict:
    run = RunDir(tmp_path / "run")
    for rank, (curve, seconds) in enumerate(zip(curves, step_s)):
        write_lines(run.peer(rank).steps, steps(max(curve), seconds))
        write_lines(run.peer(rank).evals, evals(curve, seconds, metric))
        run.peer(rank).result.write_text(json.dumps({"rank": rank, "role": "worker", "evaluations": len(curve),
                                                     "eval_s": 1.0 * len(curve), "snapshot_s": 0.1}))
    return build_summary(run, config(metric, target) | {"eval_every": eval_every}, outcome())


def test_the_crossing_is_interpolated_between_the_evaluations_around_it(tmp_path):
    # 0.5 at step 5, 0.9 at step 10: 0.8 is three quarters of the way, at step 8.75
    summary = summary_of(tmp_path, [{0: 0.1, 5: 0.5, 10: 0.9, 15: 0.95}], [2.0], target=0.8)
    assert summary["steps_to_target"] == pytest.approx(8.75)
    assert summary["time_to_target_s"] == pytest.approx(17.5)  # 8.75 steps of 2 s, not 20 s at step 10
    assert summary["samples_to_target"] == pytest.approx(8.75 * BATCH)
    assert summary["time_per_sample_s"] == pytest.approx(2.0 / BATCH)


def test_a_crossing_that_does_not_hold_at_the_next_evaluation_does_not_count(tmp_path):
    # 0.85 at step 5 drops to 0.7 at step 10; the crossing that holds is between steps 10 and 15 (0.9)
    summary = summary_of(tmp_path, [{0: 0.1, 5: 0.85, 10: 0.7, 15: 0.9, 20: 0.95}], [1.0], target=0.8)
    assert summary["steps_to_target"] == pytest.approx(12.5)
    assert summary["time_to_target_s"] == pytest.approx(12.5)


def test_a_crossing_at_the_last_evaluation_is_unconfirmed(tmp_path):
    summary = summary_of(tmp_path, [{0: 0.1, 5: 0.5, 10: 0.7, 15: 0.85}], [1.0], target=0.8)
    assert summary["accuracy_by_worker"]["worst"] == 0.85  # the run ended above the target ...
    assert summary["time_to_target_s"] is None and summary["samples_to_target"] is None  # ... unconfirmed
    assert summary["time_to_target_by_rank"] == {0: None}


def test_a_target_met_at_the_start_is_met_at_zero(tmp_path):
    summary = summary_of(tmp_path, [{0: 0.9, 5: 0.95, 10: 0.95}], [1.0], target=0.8)
    assert summary["time_to_target_s"] == 0 and summary["samples_to_target"] == 0
    assert summary["time_per_sample_s"] is None


def test_the_worst_worker_sets_time_and_samples_and_a_loss_target_is_met_from_above(tmp_path):
    # rank 0 (1 s steps): loss 1.0 -> 0.2 between steps 5 and 10, 0.6 at step 7.5 (7.5 s);
    # rank 1 (1.2 s steps): 0.8 -> 0.4 between steps 10 and 15, 0.6 at step 12.5 (15 s)
    curves = [{0: 2.0, 5: 1.0, 10: 0.2, 15: 0.1, 20: 0.1}, {0: 2.0, 5: 1.2, 10: 0.8, 15: 0.4, 20: 0.3}]
    summary = summary_of(tmp_path, curves, [1.0, 1.2], target=0.6, metric="test_loss")
    assert summary["time_to_target_by_rank"] == {0: pytest.approx(7.5), 1: pytest.approx(15.0)}
    assert summary["time_to_target_s"] == pytest.approx(15.0) and summary["steps_to_target"] == pytest.approx(12.5)
    assert summary["samples_to_target"] == pytest.approx(2 * 12.5 * BATCH)  # both workers' samples at step 12.5
    assert summary["time_per_sample_s"] == pytest.approx(15.0 / (2 * 12.5 * BATCH))


def test_the_summary_states_the_resolution_and_the_cost_of_evaluating(tmp_path):
    curves = [{0: 0.1, 5: 0.5, 10: 0.9, 15: 0.95}] * 2
    evaluation = summary_of(tmp_path, curves, [1.0, 1.0], target=0.8)["evaluation"]
    assert evaluation["interval_steps"] == 5 and evaluation["interval_samples"] == 2 * 5 * BATCH
    assert evaluation["test_samples"] == 359 and evaluation["evaluations"] == 4
    assert evaluation["after_training_s"] == 4.0 and evaluation["snapshot_pause_s"] == 0.1
