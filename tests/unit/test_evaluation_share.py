"""bench/evaluation_share.py reads a run's own records: every state evaluated once counts once, however many workers
copied its evaluation, and the share is evaluation (in training and after) over the whole command; a coarser
interval's crossing is read from the evaluations that interval would have kept, and kept with its own stamp."""
import json

import pytest

from bench.evaluation_share import crossing_check, crossings, figures_of, policy_steps


def write_run(path, evals_by_rank: dict[int, list[dict]], status: str = "completed"):
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps({
        "status": status, "error": None, "wall_s": 50.0,
        "target": {"metric": "test_accuracy", "value": 0.95, "estimator": "confirmed_crossing"},
        "evaluation": {"after_training_s": 12.0, "snapshot_pause_s": 0.5, "evaluations": 2, "test_samples": 359},
        "machine": {"alone": True, "other_cpu_share": 0.01}}))
    for rank, evals in evals_by_rank.items():
        peer = path / f"peer{rank}"
        peer.mkdir()
        (peer / "steps.jsonl").write_text("".join(json.dumps({"step": s, "train_s": 10.0 * s + rank}) + "\n"
                                                  for s in (1, 2)))
        (peer / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))


def test_two_workers_sharing_their_evaluations_count_each_state_once(tmp_path):
    # rank 0 computed the step-0 state, rank 1 the step-5 state; each copied the other's record
    step0 = {"step": 0, "precise_bn_s": 3.0, "eval_s": 5.0, "evaluated_by": 0}
    step5 = {"step": 5, "precise_bn_s": 4.0, "eval_s": 7.0, "evaluated_by": 1}
    write_run(tmp_path / "run", {0: [step0, step5], 1: [step0, step5]})
    figures = figures_of(tmp_path / "run", command_s=60.0)
    assert figures["evaluations_computed"] == 2
    assert figures["precise_bn_s"] == pytest.approx(3.0 + 4.0)
    assert figures["load_and_test_pass_s"] == pytest.approx((5.0 - 3.0) + (7.0 - 4.0))
    assert figures["train_s"] == pytest.approx(21.0)  # the longest worker's
    assert figures["share"] == pytest.approx(12.0 / 60.0)


def test_a_failed_run_is_no_measurement(tmp_path):
    write_run(tmp_path / "run", {0: []}, status="failed")
    with pytest.raises(RuntimeError, match="failed"):
        figures_of(tmp_path / "run", command_s=60.0)


def curve(accuracy_every_5: list[float]) -> list[dict]:
    return [{"step": 5 * i, "test_accuracy": a} for i, a in enumerate(accuracy_every_5)]


def test_a_coarser_interval_reads_the_worst_workers_crossing_from_the_evaluations_it_keeps(tmp_path):
    early = curve([0.1, 0.5, 0.8, 0.96, 0.97, 0.97, 0.98, 0.98, 0.98, 0.98, 0.98])
    late = curve([0.1, 0.3, 0.6, 0.7, 0.9, 0.96, 0.97, 0.98, 0.98, 0.98, 0.98])
    write_run(tmp_path / "run", {0: early, 1: late})
    found = crossings(tmp_path / "run", every=25, confirm_after=0)
    # by hand: dense, the late worker's 0.9 at step 20 to 0.96 at 25; every 25 (steps 0, 25, 50), 0.1 at 0 to 0.96 at 25
    assert found["dense"] == pytest.approx(20 + 5 * 0.05 / 0.06)
    assert found["coarse"] == pytest.approx(25 * 0.85 / 0.86)
    assert found["shift_intervals"] == pytest.approx((25 * 0.85 / 0.86 - 20 - 5 * 0.05 / 0.06) / 25)
    assert found["dense_every"] == 5 and found["within"]


TARGET = {"metric": "test_accuracy", "value": 0.95, "estimator": "confirmed_crossing"}


def by_step(accuracy_every_5: list[float]) -> dict[int, float]:
    return {e["step"]: e["test_accuracy"] for e in curve(accuracy_every_5)}


def test_the_policy_confirms_a_crossing_soon_after_every_worker_is_at_the_target():
    early = by_step([0.1, 0.5, 0.8, 0.96, 0.97, 0.97, 0.98, 0.98, 0.98, 0.98, 0.98])
    late = by_step([0.1, 0.3, 0.6, 0.7, 0.9, 0.96, 0.97, 0.98, 0.98, 0.98, 0.98])
    assert policy_steps([early, late], 25, 5, TARGET) == [0, 25, 30]  # both at the target at 25, confirmed at 30
    assert policy_steps([early, late], 25, 0, TARGET) == [0, 25, 50]
    below = by_step([0.1, 0.3, 0.6, 0.7, 0.9, 0.92, 0.93, 0.94, 0.96, 0.97, 0.96, 0.98, 0.98])
    longer = by_step([0.1, 0.5, 0.8, 0.96, 0.97, 0.97, 0.98, 0.98, 0.98, 0.98, 0.98, 0.98, 0.98])
    assert policy_steps([longer, below], 25, 5, TARGET) == [0, 25, 50, 55]  # one worker below at 25: no early one
    assert policy_steps([below], 25, 5, TARGET) == [25, 50, 55]  # below the target at 25: the start is not evaluated


def test_a_confirmation_that_fails_goes_back_to_the_interval():
    dips = by_step([0.1, 0.5, 0.8, 0.9, 0.93, 0.96, 0.94, 0.95, 0.96, 0.97, 0.97])
    assert policy_steps([dips], 25, 5, TARGET) == [0, 25, 30, 50]  # 0.94 at 30; 50, the last, confirms nothing


def test_a_crossing_the_coarser_interval_cannot_confirm_is_not_within(tmp_path):
    # confirmed at step 45 by step 50 every 5 steps; every 25, step 50 is the last and nothing confirms it
    write_run(tmp_path / "sweep" / "run", {0: curve([0.1] * 9 + [0.96, 0.97])})
    write_run(tmp_path / "sweep" / "coarse", {0: [{"step": 0, "test_accuracy": 0.1}, {"step": 25, "test_accuracy": 0.5}]})
    write_run(tmp_path / "sweep" / "crashed", {0: [{"step": 0, "test_accuracy": 0.1}]}, status="failed")
    check = crossing_check([tmp_path / "sweep"], every=25, confirm_after=0)
    assert check["runs"] == 1  # runs evaluated no more often than every 25 steps, or once, have nothing to compare
    (run,) = check["by_run"]
    assert run["dense"] == pytest.approx(40 + 5 * 0.85 / 0.86) and run["coarse"] is None
    assert not run["within"] and check["within"] == 0


def test_a_new_share_keeps_the_saved_crossing_check_with_its_own_date_and_machine_only_at_the_same_interval(tmp_path):
    from bench.evaluation_share import kept_crossing_check
    from bench.results import BenchResult, save
    from metrics.recording.machine import fingerprint

    machine = fingerprint() | {"cpu_model": "elsewhere"}
    save(BenchResult.of({"name": "evaluation_share", "goal": "g", "sweeps": [{"path": "multirun/dense", "kept": False,
                                                                             "summary": "crossing_check"}],
                         "crossing_check": {"every": 25, "runs": 3}, "crossing_goal": "within one interval",
                         "crossing_goal_met": True, "measured_at": "2026-11-29 14:20:30", "machine": machine}),
         tmp_path)
    kept = kept_crossing_check(tmp_path, 25, 0)
    assert kept["crossing_check"] == {"every": 25, "runs": 3, "measured_at": "2026-11-29 14:20:30", "machine": machine}
    assert kept["sweeps"][0]["path"] == "multirun/dense" and kept["crossing_goal_met"] is True
    assert kept_crossing_check(tmp_path, 10, 0) is None  # another interval: that check says nothing of this one
    assert kept_crossing_check(tmp_path, 25, 5) is None  # nor of a policy that confirms sooner
    assert kept_crossing_check(tmp_path / "none", 25, 0) is None
