"""bench/evaluation_share.py reads a run's own records: every state evaluated once counts once, however many workers
copied its evaluation, and the share is evaluation after training over the whole command."""
import json

import pytest

from bench.evaluation_share import figures_of


def write_run(path, evals_by_rank: dict[int, list[dict]], status: str = "completed"):
    path.mkdir()
    (path / "summary.json").write_text(json.dumps({
        "status": status, "error": None, "wall_s": 50.0,
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
