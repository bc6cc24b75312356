"""Evaluation after training (unit tier): precise BatchNorm makes the evaluated model a function of its
parameters alone, so that workers with equal parameters evaluate equally; every test sample's outcome is kept
for the bootstrap; evaluated weights are deleted or kept."""
import json
import os
import time

import numpy as np
import psutil
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from job.evaluation import Evaluator, HostBoard, HostEvaluation, PreciseBatchNorm, Snapshots, evaluate
from job.model import GhostBatchNorm2d, state_digest, tiny
from metrics.recording.jsonl import read_jsonl
from metrics.recording.rundir import PeerDir
from metrics.recording.steplog import StepLog

pytestmark = pytest.mark.timeout(60)
CPU = torch.device("cpu")


def images(count: int, seed: int, shift: float = 0.0) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(count, 1, 8, 8, generator=gen) * 2 + shift,
                         torch.randint(0, 10, (count,), generator=gen))


def trained_on(model: nn.Module, data: TensorDataset) -> nn.Module:
    """The model after a few training-mode forward passes: its BatchNorm running statistics are data's."""
    model.train()
    with torch.no_grad():
        for x in data.tensors[0].split(16):
            model(x)
    return model


def test_precise_statistics_are_the_subset_batches_mean_and_variance():
    data = images(100, seed=0, shift=3.0)
    norm = nn.BatchNorm2d(1)
    PreciseBatchNorm(data, samples=64, batch_size=16, device=CPU)(norm)
    order = torch.randperm(100, generator=torch.Generator().manual_seed(0))[:64]  # the fixed subset
    batches = data.tensors[0][order].split(16)
    assert norm.running_mean.item() == pytest.approx(np.mean([b.mean().item() for b in batches]), abs=1e-5)
    assert norm.running_var.item() == pytest.approx(np.mean([b.var().item() for b in batches]), abs=1e-4)
    assert norm.momentum == 0.1  # restored


def test_workers_with_equal_parameters_evaluate_equally_after_precise_batch_norm():
    torch.manual_seed(0)
    first = tiny(10, 1)
    second = tiny(10, 1)
    second.load_state_dict(first.state_dict())
    trained_on(first, images(64, seed=1))  # each worker's running statistics come from its own batches
    trained_on(second, images(64, seed=2, shift=1.0))
    test = images(50, seed=3)
    assert state_digest(first) != state_digest(second)
    assert evaluate(first, test, CPU)[0] != evaluate(second, test, CPU)[0]
    precise = PreciseBatchNorm(images(200, seed=4), samples=128, batch_size=32, device=CPU)
    for model in (first, second):
        precise(model)
    assert state_digest(first) == state_digest(second)
    assert evaluate(first, test, CPU)[0] == evaluate(second, test, CPU)[0]


def test_a_model_without_batch_norm_is_left_as_it_is():
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    before = state_digest(model)
    PreciseBatchNorm(images(64, seed=0), samples=64, batch_size=32, device=CPU)(model)
    assert state_digest(model) == before


def test_ghost_batch_norm_gets_the_same_precise_statistics_as_plain_batch_norm():
    data = images(96, seed=5)
    ghost, plain = GhostBatchNorm2d(1, group=16), nn.BatchNorm2d(1)
    precise = PreciseBatchNorm(data, samples=96, batch_size=16, device=CPU)
    precise(ghost)
    precise(plain)
    assert torch.equal(ghost.running_mean, plain.running_mean) and torch.equal(ghost.running_var, plain.running_var)


def test_every_test_samples_outcome_adds_up_to_the_figures():
    torch.manual_seed(0)
    figures, outcome = evaluate(tiny(10, 1), images(70, seed=6), CPU, batch_size=32)
    assert figures["test_samples"] == 70 == len(outcome["correct"]) == len(outcome["loss"])
    assert figures["test_accuracy"] == outcome["correct"].mean()
    assert figures["test_loss"] == pytest.approx(float(outcome["loss"].astype(float).mean()), rel=1e-6)


@pytest.mark.parametrize("keep", [False, True])
def test_snapshots_are_evaluated_with_their_digest_and_outcomes_then_deleted_or_kept(tmp_path, keep):
    peer = PeerDir(tmp_path / "peer0")
    torch.manual_seed(0)
    model = tiny(10, 1)
    snapshots, log = Snapshots(peer.snapshots, CPU, precise=True), StepLog(peer.path)
    snapshots.take(model, step=0, wall_s=0.0, train_s=0.0, samples=0)
    trained_on(model, images(64, seed=7))
    with torch.no_grad():
        model[-1].bias += 1.0
    snapshots.take(model, step=5, wall_s=1.0, train_s=0.9, samples=160)
    test = images(40, seed=8)
    precise = PreciseBatchNorm(images(64, seed=9), samples=64, batch_size=32, device=CPU)
    done = snapshots.evaluate_all(host_evaluation(tmp_path / "board", 0, test, precise), log, peer.eval_samples,
                                  peer.weights if keep else None)
    log.close()
    evals = read_jsonl(peer.evals)
    assert done["evaluations"] == 2 and [e["step"] for e in evals] == [0, 5]
    assert evals[0]["state_sha256"] != evals[1]["state_sha256"] and all(e["precise_bn_s"] > 0 for e in evals)
    with np.load(peer.eval_samples) as saved:
        assert saved["step"].tolist() == [0, 5] and saved["correct"].shape == saved["loss"].shape == (2, 40)
        assert [c.mean() for c in saved["correct"]] == [e["test_accuracy"] for e in evals]
    assert not peer.snapshots.exists()
    kept = sorted(p.name for p in peer.weights.glob("*.pt")) if keep else []
    assert kept == (["step0000000.pt", "step0000005.pt"] if keep else [])


# --- the workers of a host split their distinct snapshot states ------------------------------------
class CountingEvaluator(Evaluator):
    """An evaluator that remembers the state (parameters and buffers, as saved) of every snapshot it evaluated."""

    def __init__(self, *args):
        super().__init__(*args)
        self.states = []

    def __call__(self, path):
        saved = torch.load(path, weights_only=True)
        self.states.append(b"".join(v.numpy().tobytes() for k, v in saved.items() if "running" not in k
                                    and "num_batches" not in k))
        return super().__call__(path)


def host_evaluation(board_dir, rank, test, precise, patience_s=60.0, counting=False) -> HostEvaluation:
    board = HostBoard(board_dir, rank)
    board.register()
    torch.manual_seed(1)
    evaluator = (CountingEvaluator if counting else Evaluator)(tiny(10, 1), test, CPU, precise)
    return HostEvaluation(board, evaluator, patience_s)


def trajectory(peer: PeerDir, steps, statistics_seed: int, precise: bool = True, parameters_seed: int = 0) -> Snapshots:
    """Snapshots of a model whose parameters change at every step the same way for a given parameters_seed (the
    states of a synchronous strategy's workers), while its BatchNorm statistics come from each worker's own batches
    (statistics_seed)."""
    torch.manual_seed(parameters_seed)
    model = tiny(10, 1)
    snapshots = Snapshots(peer.snapshots, CPU, precise=precise)
    for step in steps:
        with torch.no_grad():
            model[-1].bias += 0.3 * step
        trained_on(model, images(32, seed=statistics_seed + step))
        snapshots.take(model, step=step, wall_s=float(step), train_s=float(step), samples=32 * step)
    return snapshots


def run_together(workers: dict) -> None:
    """Drive the workers' evaluations one action at a time, in turn, as processes of one host would run them."""
    running = {rank: snapshots.evaluating(host, log, peer.eval_samples) for rank, (peer, snapshots, host, log)
               in workers.items()}
    while running:
        for rank in list(running):
            if next(running[rank], None) is None:
                del running[rank]
                workers[rank][3].close()


def evaluations_of(peer: PeerDir) -> tuple[list[dict], dict]:
    with np.load(peer.eval_samples) as saved:
        return read_jsonl(peer.evals), {name: saved[name] for name in saved.files}


FIGURES = ("step", "test_loss", "test_accuracy", "test_samples", "state_sha256", "snapshot_key")


def test_snapshot_keys_leave_out_only_the_statistics_precise_batch_norm_recomputes(tmp_path):
    first = trajectory(PeerDir(tmp_path / "peer0"), [0, 5], statistics_seed=100)
    second = trajectory(PeerDir(tmp_path / "peer1"), [0, 5], statistics_seed=200)
    assert [s.key for s in first.taken] == [s.key for s in second.taken]  # equal parameters, other statistics
    assert first.taken[0].key != first.taken[1].key  # other parameters
    as_trained = trajectory(PeerDir(tmp_path / "peer2"), [0, 5], statistics_seed=100, precise=False)
    other = trajectory(PeerDir(tmp_path / "peer3"), [0, 5], statistics_seed=200, precise=False)
    assert as_trained.taken[0].key != other.taken[0].key  # evaluated as trained, the statistics count


def test_identical_states_are_evaluated_once_and_every_worker_gets_all_its_evaluations(tmp_path):
    steps, test = [0, 5, 10, 15, 20], images(40, seed=8)
    precise = PreciseBatchNorm(images(64, seed=9), samples=64, batch_size=32, device=CPU)
    workers = {}
    for rank in (0, 1):
        peer = PeerDir(tmp_path / f"peer{rank}")
        workers[rank] = (peer, trajectory(peer, steps, statistics_seed=100 * (rank + 1)),
                         host_evaluation(tmp_path / "board", rank, test, precise, counting=True), StepLog(peer.path))
    run_together(workers)

    alone = PeerDir(tmp_path / "alone" / "peer0")
    snapshots, log = trajectory(alone, steps, statistics_seed=100), StepLog(alone.path)
    snapshots.evaluate_all(host_evaluation(tmp_path / "alone" / "board", 0, test, precise), log, alone.eval_samples)
    log.close()
    expected, expected_outcomes = evaluations_of(alone)

    evaluated = [state for _, _, host, _ in workers.values() for state in host.evaluator.states]
    assert len(evaluated) == len(set(evaluated)) == len(steps)  # every state once, over both workers
    assert all(host.evaluated > 0 for _, _, host, _ in workers.values())  # split between them
    for rank, (peer, _, _, _) in workers.items():
        evals, outcomes = evaluations_of(peer)
        assert [{k: e[k] for k in FIGURES} for e in evals] == [{k: e[k] for k in FIGURES} for e in expected]
        assert all(np.array_equal(outcomes[k], expected_outcomes[k]) for k in ("step", "correct", "loss"))
        assert {e["evaluated_by"] for e in evals} == {0, 1}  # some copied from the other worker, marked so
        assert [e["wall_s"] for e in evals] == [float(s) for s in steps]  # on each worker's own clock
        assert not peer.snapshots.exists()


def test_a_worker_done_with_its_own_snapshots_helps_with_the_others(tmp_path):
    """Distinct states (an asynchronous strategy): one worker has 1 snapshot, the other 5; both evaluate the 5."""
    test = images(40, seed=8)
    workers = {}
    for rank, steps in ((0, [0]), (1, [0, 5, 10, 15, 20])):
        peer = PeerDir(tmp_path / f"peer{rank}")
        workers[rank] = (peer, trajectory(peer, steps, statistics_seed=0, parameters_seed=rank),
                         host_evaluation(tmp_path / "board", rank, test, None, counting=True), StepLog(peer.path))
    run_together(workers)
    evaluated = [state for _, _, host, _ in workers.values() for state in host.evaluator.states]
    assert len(evaluated) == len(set(evaluated)) == 6
    assert workers[0][2].evaluated >= 2  # its own and at least one of the other's
    assert {e["evaluated_by"] for e in read_jsonl(workers[1][0].evals)} == {0, 1}
    assert [e["step"] for e in read_jsonl(workers[0][0].evals)] == [0]


def claim_as(board_dir, rank, key, pid, started):
    """A claim of `key` written by another process (pid, its start time)."""
    (board_dir / f"{key}.claim").write_text(json.dumps({"rank": rank, "pid": pid, "started": started,
                                                        "at": time.time()}))


def test_a_claim_of_a_dead_worker_is_not_waited_for(tmp_path):
    peer, test = PeerDir(tmp_path / "peer0"), images(40, seed=8)
    snapshots, log = trajectory(peer, [0, 5], statistics_seed=0), StepLog(peer.path)
    host = host_evaluation(tmp_path / "board", 0, test, None, patience_s=1e6)
    # worker 1 registered, claimed step 5's state and died (this pid, started at another time: a reused pid)
    (tmp_path / "board" / "worker1.json").write_text(json.dumps({"rank": 1, "pid": os.getpid(), "started": 0.0}))
    claim_as(tmp_path / "board", 1, snapshots.taken[1].key, os.getpid(), 0.0)
    done = snapshots.evaluate_all(host, log, peer.eval_samples)  # a wait for the claim would outlast the test
    log.close()
    assert done["evaluated_here"] == 2 and [e["evaluated_by"] for e in read_jsonl(peer.evals)] == [0, 0]


def test_a_claim_that_stalls_past_the_patience_is_evaluated_here(tmp_path):
    peer, test = PeerDir(tmp_path / "peer0"), images(40, seed=8)
    snapshots, log = trajectory(peer, [0, 5], statistics_seed=0), StepLog(peer.path)
    host = host_evaluation(tmp_path / "board", 0, test, None, patience_s=0.5)
    me = psutil.Process()
    claim_as(tmp_path / "board", 1, snapshots.taken[0].key, me.pid, me.create_time())  # alive, never posts
    done = snapshots.evaluate_all(host, log, peer.eval_samples)
    log.close()
    assert done["evaluated_here"] == 2 and [e["step"] for e in read_jsonl(peer.evals)] == [0, 5]


# --- integration tier: real workers ---------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.timeout(240)
def test_two_allreduce_workers_evaluate_each_state_once_and_each_gets_what_it_would_alone(run_dir):
    from omegaconf import OmegaConf

    from helpers import results, run_train
    from job.data import load_splits
    from job.model import build_model

    result = run_train(run_dir, "strategy=allreduce", "peers=2", "max_steps=20", "eval_every=5", "keep_weights=true")
    assert result.returncode == 0, result.stderr
    steps = [0, 5, 10, 15, 20]
    evals = {rank: read_jsonl(run_dir / f"peer{rank}" / "eval.jsonl") for rank in (0, 1)}
    assert all([e["step"] for e in evals[rank]] == steps for rank in (0, 1))
    # the workers' states were identical at every snapshot: one evaluation each, copied by the other worker
    assert [e["snapshot_key"] for e in evals[0]] == [e["snapshot_key"] for e in evals[1]]
    assert len({e["snapshot_key"] for e in evals[0]}) == len(steps)
    assert sum(r["evaluated_here"] for r in results(run_dir, (0, 1))) == len(steps)
    assert [e["evaluated_by"] for e in evals[0]] == [e["evaluated_by"] for e in evals[1]]

    # what each worker would have computed alone: its own saved weights, evaluated here on one thread as it would
    cfg = OmegaConf.load(run_dir / ".avgbench" / "config.yaml")
    splits = load_splits(cfg)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for rank in (0, 1):
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


@pytest.mark.integration
def test_a_worker_killed_after_claiming_does_not_make_the_evaluation_hang(tmp_path):
    """Worker 1, a real process, registers, publishes the same snapshots plus one of its own, claims one, and is
    killed: worker 0 evaluates every one of its own snapshots (the claimed one too) and none of worker 1's own."""
    import subprocess
    import sys

    from helpers import ROOT

    peer, test = PeerDir(tmp_path / "peer0"), images(40, seed=8)
    snapshots = trajectory(peer, [0, 5, 10], statistics_seed=0)
    theirs = trajectory(PeerDir(tmp_path / "peer1"), [0, 5, 10, 15], statistics_seed=1)
    board_dir = tmp_path / "board"
    worker1 = f"""
import sys, time
from pathlib import Path
from job.evaluation import HostBoard, Snapshot
board = HostBoard(Path({str(board_dir)!r}), 1)
board.register()
board.publish([Snapshot(Path(p), {{"step": s}}, 0.0, k) for s, k, p in {[(s.clock["step"], s.key, str(s.path))
                                                                       for s in theirs.taken]!r}])
assert board.claim({snapshots.taken[1].key!r})
print("claimed", flush=True)
time.sleep(600)
"""
    proc = subprocess.Popen([sys.executable, "-c", worker1], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout.readline().strip() == "claimed"
    finally:
        proc.kill()
        proc.wait()
    log = StepLog(peer.path)
    done = snapshots.evaluate_all(host_evaluation(board_dir, 0, test, None, patience_s=1e6), log, peer.eval_samples)
    log.close()  # a wait for the claim (patience 1e6 s) would outlast the test's timeout
    assert done["evaluated_here"] == 3
    assert [(e["step"], e["evaluated_by"]) for e in read_jsonl(peer.evals)] == [(0, 0), (5, 0), (10, 0)]
