"""Live progress: of real tiny runs, a bar on a terminal (a pseudo-terminal of a set width) and plain lines on a
pipe (integration tier); the figures from step records (unit tier)."""
import json
import os
import time

import pytest


pytestmark = pytest.mark.timeout(300)


# --- unit tier: the figures from step records ------------------------------------------------
def progress_over(tmp_path, records_by_rank: dict[int, list[dict]], max_steps: int = 100):
    from omegaconf import OmegaConf

    from launchers.progress import Progress

    for rank, records in records_by_rank.items():
        (tmp_path / f"peer{rank}").mkdir()
        (tmp_path / f"peer{rank}" / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    cfg = OmegaConf.create({"progress": True, "progress_interval_s": 10, "max_steps": max_steps,
                            "strategy": {"name": "hivemind"}, "peers": len(records_by_rank)})
    progress = Progress(tmp_path, cfg, stream=open(os.devnull, "w"))
    progress.read()
    return progress


def record(step: int, wall_s: float, **extra) -> dict:
    return {"step": step, "wall_s": wall_s, "train_s": wall_s, "samples": 32 * step, "loss": 1.0, "comm_s": 0.0,
            **extra}


def test_a_strategy_that_stops_on_its_own_shows_its_share_done_and_a_forward_eta(tmp_path):
    """hivemind stops on an epoch boundary, after more or fewer than max_steps steps: step 123 of max_steps=100
    with 80% of the epochs done is 80% done, and the ETA is the slowest worker's remaining share at its pace."""
    progress = progress_over(tmp_path, {0: [record(123, 100.0, done=0.8)], 1: [record(90, 99.0, done=0.75)]})
    figures = progress.figures()
    assert figures.startswith("step 123 (80% done), loss 1.000")
    assert figures.endswith("ETA 0:33")  # rank 1: 99 s for 75% -> 33 s for the remaining 25%


def test_other_strategies_count_steps_against_max_steps(tmp_path):
    progress = progress_over(tmp_path, {0: [record(25, 50.0)], 1: [record(20, 40.0)]})
    assert progress.figures().startswith("step 25/100,") and progress.figures().endswith("ETA 2:40")


def test_samples_per_s_is_the_summarys_once_every_worker_is_in_the_measurement_window(tmp_path):
    """Window steps 3-6 (after step 2, 4 steps): two slow first steps (5 s each) are left out once both workers are
    in it, as summary.json leaves them out; before, the rate is over all steps so far."""
    from omegaconf import OmegaConf

    from launchers.progress import Progress

    def clock(step, pace):
        return 5.0 * min(step, 2) + pace * max(0, step - 2)

    for rank, pace in ((0, 1.0), (1, 2.0)):
        (tmp_path / f"peer{rank}").mkdir()
        (tmp_path / f"peer{rank}" / "steps.jsonl").write_text("".join(
            json.dumps(record(step, clock(step, pace))) + "\n" for step in range(1, 9 if rank == 0 else 3)))
    cfg = OmegaConf.create({"progress": True, "progress_interval_s": 10, "max_steps": 8, "peers": 2,
                            "strategy": {"name": "allreduce"}})
    progress = Progress(tmp_path, cfg, (3, 6), stream=open(os.devnull, "w"))
    progress.read()
    assert progress.rate() == pytest.approx((32 * 8 + 32 * 2) / 16.0)  # rank 1 not in it yet: all steps, rank 0 16 s
    with open(tmp_path / "peer1" / "steps.jsonl", "a") as log:
        log.write("".join(json.dumps(record(step, clock(step, 2.0))) + "\n" for step in range(3, 9)))
    progress.read()
    assert progress.rate() == pytest.approx(2 * 4 * 32 / (4 * 2.0))  # steps 3-6 of both; rank 1 the longer, 8 s


def test_a_run_that_stopped_at_its_target_ends_on_a_line_that_says_so_not_on_an_eta(tmp_path):
    """Evaluated in training, it stopped at step 50 of 100: its last line says so once every worker's result does."""
    progress = progress_over(tmp_path, {0: [record(50, 50.0)], 1: [record(50, 50.0)]})
    for rank, stopped in ((0, True), (1, False)):
        (tmp_path / f"peer{rank}" / "result.json").write_text(json.dumps({"stopped_at_target": stopped}))
    assert progress.line(None, final=True).endswith("ETA 0:50")  # one worker ran on: no stop at the target
    (tmp_path / "peer1" / "result.json").write_text(json.dumps({"stopped_at_target": True}))
    assert progress.line(None, final=True) == "step 50/100, loss 1.000, 64 samples/s, comm 0%, stopped at the target"
    assert progress.line(None).endswith("ETA 0:50")  # while it runs


# --- unit tier: the evaluation after training, from the hosts' boards -------------------------------
def board_of(tmp_path, ended: dict[int, list[str]], posted: list[str], since: float, last_posted: float):
    """Files of a machine board: each worker's snapshot keys (published: its training ended) and the posted
    evaluations (job/evaluation.py MachineBoard)."""
    board = tmp_path / ".avgbench" / "evaluation" / "machine"
    board.mkdir(parents=True)
    for rank, keys in ended.items():
        (board / f"snapshots{rank}.json").write_text(json.dumps({
            "rank": rank, "ended_at": since, "snapshots": [{"step": i, "key": k, "path": ""} for i, k in enumerate(keys)]}))
    for key in posted:
        (board / f"{key}.json").write_text(json.dumps({"posted_at": last_posted, "evaluated_by": 0}))


def test_once_training_has_ended_the_line_counts_the_distinct_snapshots_evaluated_and_their_eta(
        tmp_path, monkeypatch):
    progress = progress_over(tmp_path, {0: [record(100, 50.0)], 1: [record(100, 50.0)]})
    now = time.time()
    monkeypatch.setattr("launchers.progress.time.time", lambda: now)  # the line is made at `now`
    # a synchronous strategy: both workers saved the same 5 states; 2 evaluated in the 20 s since training ended
    board_of(tmp_path, {0: list("abcde"), 1: list("abcde")}, posted=["a", "b"], since=now - 20, last_posted=now - 1)
    line = progress.line(progress.evaluation())
    assert line.startswith("evaluating snapshot 3 of 5, ETA 0:30 (step 100/100, loss 1.000")  # 3 left at 10 s each
    assert progress.share_done(progress.evaluation()) == pytest.approx(0.4)


def test_the_evaluation_shows_only_once_every_worker_has_ended_training(tmp_path):
    progress = progress_over(tmp_path, {0: [record(100, 50.0)], 1: [record(90, 50.0)]})
    board_of(tmp_path, {0: list("ab")}, posted=["a"], since=time.time() - 20, last_posted=time.time())
    assert progress.evaluation() is None and "ETA" in progress.line(None)  # worker 1 still trains
    (tmp_path / "peer1" / "error.txt").write_text("rank 1 failed")
    assert progress.evaluation() is not None  # a failed worker is not waited for


def test_at_the_end_the_line_says_how_long_evaluating_took(tmp_path):
    progress = progress_over(tmp_path, {0: [record(100, 50.0)]})
    board_of(tmp_path, {0: list("abc")}, posted=list("abc"), since=1000.0, last_posted=1075.0)
    assert progress.line(progress.evaluation()) == "step 100/100, loss 1.000, 64 samples/s, comm 0%, evaluated in 1:15"
