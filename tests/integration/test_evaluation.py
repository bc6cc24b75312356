"""Evaluation after training: precise BatchNorm makes the evaluated model a function of its
parameters alone, so that workers with equal parameters evaluate equally; every test sample's outcome is kept
for the bootstrap; evaluated weights are deleted or kept."""
import contextlib
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from helpers import CPU, ROOT, images, machine_evaluation, pausing_worker, trajectory
from job.evaluation import Evaluator, MachineBoard, PreciseBatchNorm
from metrics.recording.jsonl import read_jsonl
from metrics.recording.rundir import PeerDir
from metrics.recording.steplog import StepLog

pytestmark = pytest.mark.timeout(60)


# --- integration tier: real workers ---------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_one_process_evaluates_on_every_core_of_its_host_once_training_ended(run_dir):
    """It trained on its one core (peer_cpus=1); the machine's other cores stood idle until evaluation took them."""
    from helpers import QUICK, results, run_train

    result = run_train(run_dir, *QUICK, "strategy=single", "max_steps=4", "eval_every=2", "eval_in_training=false")
    assert result.returncode == 0, result.stderr
    (worker,) = results(run_dir, (0,))
    assert len(worker["cores"]) == 1
    assert set(worker["evaluation_cores"]) == os.sched_getaffinity(0)
    assert worker["evaluation_threads"] == len(os.sched_getaffinity(0))


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_two_allreduce_workers_evaluate_each_state_once_and_each_gets_what_it_would_alone(run_dir):
    from omegaconf import OmegaConf

    from helpers import results, run_train
    from job.data import load_splits
    from job.model import build_model

    result = run_train(run_dir, "strategy=allreduce", "peers=2", "max_steps=20", "eval_every=5", "keep_weights=true",
                       "eval_in_training=false")
    assert result.returncode == 0, result.stderr
    steps = [0, 5, 10, 15, 20]
    evals = {rank: read_jsonl(run_dir / f"peer{rank}" / "eval.jsonl") for rank in (0, 1)}
    assert all([e["step"] for e in evals[rank]] == steps for rank in (0, 1))
    # the workers' states were identical at every snapshot: one evaluation each, copied by the other worker
    assert [e["snapshot_key"] for e in evals[0]] == [e["snapshot_key"] for e in evals[1]]
    assert len({e["snapshot_key"] for e in evals[0]}) == len(steps)
    assert sum(r["evaluated_here"] for r in results(run_dir, (0, 1))) == len(steps)
    assert [e["evaluated_by"] for e in evals[0]] == [e["evaluated_by"] for e in evals[1]]

    # once both had ended training, they evaluated on the host's cores, one share each
    shares = [set(r["evaluation_cores"]) for r in results(run_dir, (0, 1))]
    assert not shares[0] & shares[1] and shares[0] | shares[1] == os.sched_getaffinity(0)

    # what each worker would have computed alone: its own saved weights, evaluated here on its threads
    cfg = OmegaConf.load(run_dir / ".avgbench" / "config.yaml")
    splits = load_splits(cfg)
    threads = torch.get_num_threads()
    try:
        for rank, result in zip((0, 1), results(run_dir, (0, 1))):
            torch.set_num_threads(result["evaluation_threads"])
            torch.manual_seed(cfg.seed)
            evaluator = Evaluator(build_model(cfg, splits.num_classes, splits.channels), splits.test, CPU,
                                  PreciseBatchNorm(splits.train, cfg.precise_bn_samples, cfg.batch_size, CPU))
            peer = PeerDir(run_dir / f"peer{rank}")
            with np.load(peer.eval_samples) as saved:
                assert saved["step"].tolist() == steps
                for i, step in enumerate(steps):
                    figures, outcome = evaluator(peer.weights / f"step{step:07d}.pt")
                    logged = evals[rank][i]
                    assert {k: logged[k] for k in ("test_loss", "test_accuracy", "state_sha256")} == \
                           {k: figures[k] for k in ("test_loss", "test_accuracy", "state_sha256")}
                    assert np.array_equal(saved["correct"][i], outcome["correct"])
                    assert np.array_equal(saved["loss"][i], outcome["loss"])
    finally:
        torch.set_num_threads(threads)


def start_as_needed(curves: list[list[dict]], value: float) -> bool:
    """Whether the start (step 0) was evaluated exactly where some worker's next evaluation was at the target value
    (the crossing interpolates from the start), and left out elsewhere."""
    started = [curve[0]["step"] == 0 for curve in curves]
    if all(started):
        return any(curve[1]["test_accuracy"] >= value for curve in curves)
    return not any(started) and all(curve[0]["test_accuracy"] < value for curve in curves)


def confirming_sooner(curves: list[list[dict]], every: int, confirm_after: int, value: float) -> bool:
    """Whether each evaluation of the workers' curves came at the next multiple of `every`, or `confirm_after` steps
    on where every worker's evaluation before was at the target value (test_accuracy)."""
    steps = [e["step"] for e in curves[0]]
    for i in range(len(steps) - 1):
        at_target = all(curve[i]["test_accuracy"] >= value for curve in curves)
        if steps[i + 1] != (steps[i] + confirm_after if at_target else (steps[i] // every + 1) * every):
            return False
    return True


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_two_allreduce_workers_evaluating_in_training_end_together_where_their_curve_confirms_the_target(run_dir):
    """The workers hold one state: the first evaluates it, on both workers' cores, and both log its evaluation. Both
    end at the first evaluation at which the curve logged so far reaches the target, well before max_steps, with the
    evaluations left out of train_s; once at the target, the next evaluation comes eval_confirm_after steps on."""
    from helpers import QUICK, results, run_train, summary_of
    from metrics.summary.target import crossing_step

    result = run_train(run_dir, *QUICK, "strategy=allreduce", "peers=2", "max_steps=60", "eval_every=4",
                       "eval_confirm_after=3", "target.value=0.5")
    assert result.returncode == 0, result.stderr
    target = {"metric": "test_accuracy", "value": 0.5, "estimator": "causal_isotonic"}
    evals = {rank: read_jsonl(run_dir / f"peer{rank}" / "eval.jsonl") for rank in (0, 1)}
    steps = [e["step"] for e in evals[0]]
    accuracy = [e["test_accuracy"] for e in evals[0]]
    first = next(k for k in range(1, len(steps) + 1) if crossing_step(steps[:k], accuracy[:k], target) is not None)
    stop = steps[first - 1]
    assert stop < 60 and len(steps) == first  # nothing evaluated after the confirming evaluation
    assert confirming_sooner([evals[0]], 4, 3, 0.5) and stop % 4 != 0
    assert start_as_needed([evals[0]], 0.5)
    cores = sorted(os.sched_getaffinity(0))
    assert all(e["evaluated_by"] == 0 and e["evaluated_on"] == cores for r in (0, 1) for e in evals[r])
    assert [r["evaluated_here"] for r in results(run_dir, (0, 1))] == [len(steps), 0]
    for rank in (0, 1):
        assert [e["state_sha256"] for e in evals[rank]] == [e["state_sha256"] for e in evals[0]]
        trained = read_jsonl(run_dir / f"peer{rank}" / "steps.jsonl")
        assert trained[-1]["step"] == stop  # both stopped there
        assert trained[-1]["wall_s"] - trained[-1]["train_s"] >= sum(e["eval_s"] for e in evals[rank][:-1])
    assert all(r["stopped_at_target"] and r["steps"] == stop for r in results(run_dir, (0, 1)))
    summary = summary_of(run_dir)
    assert summary["evaluation"]["mode"] == "in_training" and summary["evaluation"]["stopped_at_target"]
    assert summary["steps_to_target"] == pytest.approx(crossing_step(steps, accuracy, target))
    assert summary["evaluated_states_identical"] is True


@pytest.mark.integration
@pytest.mark.timeout(240)
@pytest.mark.parametrize("strategy", ["stepwise", "ps"])
def test_workers_evaluating_their_own_states_in_training_stop_where_both_curves_confirm_the_target(run_dir, strategy):
    """Each worker evaluates its own state; the run ends at the first evaluation where every worker's curve so far
    confirms the crossing (the run's crossing is its last worker's), the same step on both. ps's server then applies
    no more updates than the workers' steps and exits."""
    from helpers import QUICK, results, run_train, summary_of
    from metrics.summary.target import crossing_step

    result = run_train(run_dir, *QUICK, f"strategy={strategy}", "peers=2", "max_steps=60", "eval_every=4",
                       "target.value=0.5")
    assert result.returncode == 0, result.stderr
    target = {"metric": "test_accuracy", "value": 0.5, "estimator": "causal_isotonic"}
    evals = {rank: read_jsonl(run_dir / f"peer{rank}" / "eval.jsonl") for rank in (0, 1)}
    steps = [e["step"] for e in evals[0]]
    assert [e["step"] for e in evals[1]] == steps

    def confirmed(rank: int, k: int) -> bool:
        return crossing_step(steps[:k], [e["test_accuracy"] for e in evals[rank][:k]], target) is not None

    first = next(k for k in range(1, len(steps) + 1) if confirmed(0, k) and confirmed(1, k))
    stop = steps[first - 1]
    assert stop < 60 and len(steps) == first  # nothing evaluated after the evaluation where both confirmed it
    assert confirming_sooner([evals[0], evals[1]], 4, 5, 0.5) and start_as_needed([evals[0], evals[1]], 0.5)
    for at_step in zip(evals[0], evals[1]):  # each state (its key) evaluated once
        one_state = at_step[0]["snapshot_key"] == at_step[1]["snapshot_key"]
        assert [e["evaluated_by"] for e in at_step] == ([0, 0] if one_state else [0, 1])
    for rank in (0, 1):
        assert read_jsonl(run_dir / f"peer{rank}" / "steps.jsonl")[-1]["step"] == stop
    assert all(r["stopped_at_target"] and r["steps"] == stop for r in results(run_dir, (0, 1)))
    summary = summary_of(run_dir)
    assert summary["evaluation"]["mode"] == "in_training" and summary["evaluation"]["stopped_at_target"]
    servers = [p["result"]["strategy"] for p in summary["peers"] if p["result"]["role"] == "server"]
    assert [(s["updates"], s["pushes"]) for s in servers] == ([(stop, 2 * stop)] if strategy == "ps" else [])


@contextlib.contextmanager
def board_worker(script: str, said: str):
    """A real process running `script` on a board, until it prints `said`; killed when the block ends."""
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout.readline().strip() == said
        yield
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.integration
def test_a_worker_killed_after_claiming_does_not_make_the_evaluation_hang(tmp_path):
    """Worker 1, a real process, registers, publishes the same snapshots plus one of its own, claims one, and is
    killed: worker 0 evaluates every one of its own snapshots (the claimed one too) and none of worker 1's own."""
    peer, test = PeerDir(tmp_path / "peer0"), images(40, seed=8)
    snapshots = trajectory(peer, [0, 5, 10], statistics_seed=0)
    theirs = trajectory(PeerDir(tmp_path / "peer1"), [0, 5, 10, 15], statistics_seed=1)
    board_dir = tmp_path / "board"
    worker1 = f"""
import sys, time
from pathlib import Path
from job.evaluation import MachineBoard, Snapshot
board = MachineBoard(Path({str(board_dir)!r}), 1)
board.register()
board.publish([Snapshot(Path(p), {{"step": s}}, 0.0, k) for s, k, p in {[(s.clock["step"], s.key, str(s.path))
                                                                       for s in theirs.taken]!r}])
assert board.claim({snapshots.taken[1].key!r})
print("claimed", flush=True)
time.sleep(600)
"""
    with board_worker(worker1, "claimed"):
        pass  # killed once it claimed
    log = StepLog(peer.path)
    done = snapshots.evaluate_all(machine_evaluation(board_dir, 0, test, None, patience_s=1e6), log, peer.eval_samples)
    log.close()  # a wait for the claim (patience 1e6 s) would outlast the test's timeout
    assert done["evaluated_here"] == 3
    assert [(e["step"], e["evaluated_by"]) for e in read_jsonl(peer.evals)] == [(0, 0), (5, 0), (10, 0)]


@pytest.mark.integration
def test_a_worker_waiting_for_an_evaluator_that_died_evaluates_the_state_itself(tmp_path):
    """Rank 0, a real process, pauses with the same state and is killed before it posts an evaluation."""
    test = images(40, seed=8)
    snapshot = trajectory(PeerDir(tmp_path / "peer1"), [5], statistics_seed=1).taken[0]
    board_dir = tmp_path / "board"
    worker0 = f"""
import time
from pathlib import Path
from job.evaluation import MachineBoard
board = MachineBoard(Path({str(board_dir)!r}), 0)
board.register([0])
board.pause(5, {snapshot.key!r})
print("paused", flush=True)
time.sleep(600)
"""
    with board_worker(worker0, "paused"):
        sharing, evaluator, given, _ = pausing_worker(board_dir, 1, [1], test)  # registered while rank 0 lives
    started = time.monotonic()
    record, _ = sharing.evaluate(snapshot, evaluator)
    assert record["evaluated_by"] == 1 and len(evaluator.states) == 1 and given == [[0, 1]]
    assert time.monotonic() - started < 5  # not the patience: its evaluator is known dead


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
def test_the_emulated_hosts_of_one_machine_share_its_board():
    """An emulated host has a hostname of its own (a UTS namespace, as netemu gives it) on the machine's cores and
    PIDs: its workers evaluate with the other hosts' workers, on one board."""
    as_root = [] if os.geteuid() == 0 else ["--map-root-user"]
    inside = subprocess.run(["unshare", "--uts", *as_root, "sh", "-c", 'hostname h1 && exec "$0" -c "$1"',
                             sys.executable, "import socket; from job.evaluation import MachineBoard; "
                             "print(socket.gethostname(), MachineBoard.machine_name())"],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                            timeout=30)
    if inside.returncode and "unshare" in inside.stderr:
        pytest.skip(f"no UTS namespace here: {inside.stderr.strip()}")
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout.split() == ["h1", MachineBoard.machine_name()]
