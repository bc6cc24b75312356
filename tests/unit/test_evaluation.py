"""Evaluation after training: precise BatchNorm makes the evaluated model a function of its
parameters alone, so that workers with equal parameters evaluate equally; every test sample's outcome is kept
for the bootstrap; evaluated weights are deleted or kept."""
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import psutil
import pytest
import torch
from torch import nn

from helpers import CPU, images, machine_evaluation, pausing_worker, trained_on, trajectory
from job.evaluation import PreciseBatchNorm, Snapshots, evaluate
from job.model import GhostBatchNorm2d, state_digest, tiny
from metrics.recording.jsonl import read_jsonl
from metrics.recording.rundir import PeerDir
from metrics.recording.steplog import StepLog

pytestmark = pytest.mark.timeout(60)


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
    done = snapshots.evaluate_all(machine_evaluation(tmp_path / "board", 0, test, precise), log, peer.eval_samples,
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
                         machine_evaluation(tmp_path / "board", rank, test, precise, counting=True), StepLog(peer.path))
    run_together(workers)

    alone = PeerDir(tmp_path / "alone" / "peer0")
    snapshots, log = trajectory(alone, steps, statistics_seed=100), StepLog(alone.path)
    snapshots.evaluate_all(machine_evaluation(tmp_path / "alone" / "board", 0, test, precise), log, alone.eval_samples)
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
                         machine_evaluation(tmp_path / "board", rank, test, None, counting=True), StepLog(peer.path))
    run_together(workers)
    evaluated = [state for _, _, host, _ in workers.values() for state in host.evaluator.states]
    assert len(evaluated) == len(set(evaluated)) == 6
    assert workers[0][2].evaluated >= 2  # its own and at least one of the other's
    assert {e["evaluated_by"] for e in read_jsonl(workers[1][0].evals)} == {0, 1}
    assert [e["step"] for e in read_jsonl(workers[0][0].evals)] == [0]


@pytest.mark.parametrize("hosts", [("vm", "vm"), ("h0", "h1")])
def test_the_host_s_cores_are_handed_out_only_once_every_worker_of_the_machine_ended_training(tmp_path, hosts):
    """A worker that ends training first evaluates on its own cores while the other still trains (widening would
    take the trainer's core); once both have ended, each is told once how many workers share its host's cores: both
    on one host, or each alone on its emulated host of the machine."""
    test, told = images(40, seed=8), {0: [], 1: []}
    workers = {}
    for rank, steps in ((0, [0]), (1, [0, 5])):
        peer = PeerDir(tmp_path / f"peer{rank}")
        workers[rank] = (peer, trajectory(peer, steps, statistics_seed=0, parameters_seed=rank),
                         machine_evaluation(tmp_path / "board", rank, test, None, all_trained=told[rank].append,
                                            host=hosts[rank]),
                         StepLog(peer.path))
    peer, snapshots, machine, log = workers[0]
    first = snapshots.evaluating(machine, log, peer.eval_samples)
    assert [next(first), next(first)] == ["evaluated", "waiting"]  # its own state, then waits for worker 1
    assert told == {0: [], 1: []}
    peer, snapshots, machine, log = workers[1]
    running = {0: first, 1: snapshots.evaluating(machine, log, peer.eval_samples)}
    while running:
        for rank in list(running):
            if next(running[rank], None) is None:
                del running[rank]
                workers[rank][3].close()
    sharing = 2 if hosts[0] == hosts[1] else 1
    assert told == {0: [sharing], 1: [sharing]}
    assert sum(machine.evaluated for _, _, machine, _ in workers.values()) == 3  # each distinct state once


def claim_as(board_dir, rank, key, pid, started):
    """A claim of `key` written by another process (pid, its start time)."""
    (board_dir / f"{key}.claim").write_text(json.dumps({"rank": rank, "pid": pid, "started": started,
                                                        "at": time.time()}))


def test_a_claim_of_a_dead_worker_is_not_waited_for(tmp_path):
    peer, test = PeerDir(tmp_path / "peer0"), images(40, seed=8)
    snapshots, log = trajectory(peer, [0, 5], statistics_seed=0), StepLog(peer.path)
    host = machine_evaluation(tmp_path / "board", 0, test, None, patience_s=1e6)
    # worker 1 registered, claimed step 5's state and died (this pid, started at another time: a reused pid)
    (tmp_path / "board" / "worker1.json").write_text(json.dumps({"rank": 1, "pid": os.getpid(), "started": 0.0}))
    claim_as(tmp_path / "board", 1, snapshots.taken[1].key, os.getpid(), 0.0)
    done = snapshots.evaluate_all(host, log, peer.eval_samples)  # a wait for the claim would outlast the test
    log.close()
    assert done["evaluated_here"] == 2 and [e["evaluated_by"] for e in read_jsonl(peer.evals)] == [0, 0]


def test_a_claim_that_stalls_past_the_patience_is_evaluated_here(tmp_path):
    peer, test = PeerDir(tmp_path / "peer0"), images(40, seed=8)
    snapshots, log = trajectory(peer, [0, 5], statistics_seed=0), StepLog(peer.path)
    host = machine_evaluation(tmp_path / "board", 0, test, None, patience_s=0.5)
    me = psutil.Process()
    claim_as(tmp_path / "board", 1, snapshots.taken[0].key, me.pid, me.create_time())  # alive, never posts
    done = snapshots.evaluate_all(host, log, peer.eval_samples)
    log.close()
    assert done["evaluated_here"] == 2 and [e["step"] for e in read_jsonl(peer.evals)] == [0, 5]


# --- evaluation in training (eval_in_training) -----------------------------------------------------------

LOSS_CURVE = [2.0, 1.0, 0.5, 0.35, 0.45, 0.3, 0.25, 0.2]  # test_loss at steps 0, 5, ..., 35
LOSS_TARGET = 0.41  # the dip to 0.35 at step 15 is pooled with 0.45 after it (0.40 at step 17.5)


def predicting_class_0_with_loss(loss: float) -> nn.Module:
    """tiny() whose logits are its last bias alone: [b, 0, ..., 0] with b such that every sample of class 0 has
    cross-entropy log(1 + 9 exp(-b)) = loss."""
    model = tiny(10, 1)
    with torch.no_grad():
        model[-1].weight.zero_()
        model[-1].bias.zero_()
        model[-1].bias[0] = -np.log((np.exp(loss) - 1) / 9)
    return model


@pytest.mark.parametrize("estimator, stop_step, crossing", [
    ("causal_isotonic", 25, 16.75),  # 0.41 between 0.5 (step 10) and the pooled 0.40 (17.5); 0.30 at 25 confirms it
    ("confirmed_crossing", 30, 20 + 5 * 0.04 / 0.15),  # 0.35 at 15 not held at 20; 0.30 at 25 held at 30, from 0.45
])
def test_snapshots_evaluated_in_training_reach_the_target_where_the_next_evaluation_confirms_it(
        tmp_path, estimator, stop_step, crossing):
    from job.evaluation import Evaluator, InTraining
    from metrics.summary.target import crossing_step

    peer = PeerDir(tmp_path / "peer0")
    test = torch.utils.data.TensorDataset(torch.randn(20, 1, 8, 8), torch.zeros(20, dtype=torch.long))
    target = {"metric": "test_loss", "value": LOSS_TARGET, "estimator": estimator}
    snapshots, log = Snapshots(peer.snapshots, CPU, precise=False), StepLog(peer.path)
    snapshots.in_training = InTraining(Evaluator(tiny(10, 1), test, CPU, None), log, target)
    reached = []
    for i, loss in enumerate(LOSS_CURVE):
        snapshots.take(predicting_class_0_with_loss(loss), step=5 * i, wall_s=float(i), train_s=float(i),
                       samples=32 * i)
        reached.append(snapshots.target_reached)
        assert not snapshots.taken[-1].path.exists()
    done = snapshots.evaluated_in_training(peer.eval_samples)
    log.close()
    assert reached == [5 * i >= stop_step for i in range(len(LOSS_CURVE))]
    evals = read_jsonl(peer.evals)
    assert [e["test_loss"] for e in evals] == pytest.approx(LOSS_CURVE, abs=1e-5)
    head = [e for e in evals if e["step"] <= stop_step]
    assert crossing_step([e["step"] for e in head], [e["test_loss"] for e in head], target) == \
        pytest.approx(crossing, abs=1e-3)
    assert done["evaluations"] == len(LOSS_CURVE) and done["eval_s"] == 0.0 and done["in_training_eval_s"] > 0
    with np.load(peer.eval_samples) as saved:
        assert saved["step"].tolist() == [e["step"] for e in evals] and saved["loss"].shape == (len(LOSS_CURVE), 20)
    assert not peer.snapshots.exists()


@pytest.mark.parametrize("target_loss, another_needs_it, start_kept, crossing", [
    (0.41, False, False, 16.75),   # 1.0 at step 5 is above the target: the start is not evaluated
    (0.41, True, True, 16.75),     # ... unless another worker's next evaluation is at the target
    (1.5, False, True, 2.5),       # 1.0 at step 5 is at the target: the crossing lies between 2.0 at 0 and step 5
])
def test_the_start_is_evaluated_only_where_a_crossing_needs_it_and_the_log_stays_in_step_order(
        tmp_path, target_loss, another_needs_it, start_kept, crossing):
    from job.evaluation import Evaluator, InTraining
    from metrics.summary.target import crossing_step

    peer = PeerDir(tmp_path / "peer0")
    test = torch.utils.data.TensorDataset(torch.randn(20, 1, 8, 8), torch.zeros(20, dtype=torch.long))
    target = {"metric": "test_loss", "value": target_loss, "estimator": "causal_isotonic"}
    snapshots, log = Snapshots(peer.snapshots, CPU, precise=False), StepLog(peer.path)
    snapshots.in_training = InTraining(Evaluator(tiny(10, 1), test, CPU, None), log, target)
    for i, loss in enumerate(LOSS_CURVE):  # as job/loop.py pauses: take, then settle after the workers' claims
        snapshots.take(predicting_class_0_with_loss(loss), hold=i == 0, step=5 * i, wall_s=float(i),
                       train_s=float(i), samples=32 * i)
        if i:
            snapshots.settle_start(needed=snapshots.start_needed or another_needs_it)
        if i == 1:
            held = peer.snapshots / "step0000000.pt"
            assert held.exists() is False and snapshots.start is None
    done = snapshots.evaluated_in_training(peer.eval_samples)
    log.close()
    evals = read_jsonl(peer.evals)
    kept = LOSS_CURVE if start_kept else LOSS_CURVE[1:]
    assert [e["step"] for e in evals] == [5 * i for i in range(len(LOSS_CURVE))][len(LOSS_CURVE) - len(kept):]
    assert [e["test_loss"] for e in evals] == pytest.approx(kept, abs=1e-5)
    assert crossing_step([e["step"] for e in evals], [e["test_loss"] for e in evals], target) == \
        pytest.approx(crossing, abs=1e-3)
    assert done["evaluations"] == len(kept)
    with np.load(peer.eval_samples) as saved:
        assert saved["step"].tolist() == [e["step"] for e in evals] and saved["loss"].shape == (len(kept), 20)
    assert not peer.snapshots.exists()


def test_a_held_start_is_deleted_with_the_rest_after_a_failure(tmp_path):
    from job.evaluation import Evaluator, InTraining

    peer = PeerDir(tmp_path / "peer0")
    test = torch.utils.data.TensorDataset(torch.randn(20, 1, 8, 8), torch.zeros(20, dtype=torch.long))
    snapshots, log = Snapshots(peer.snapshots, CPU, precise=False), StepLog(peer.path)
    snapshots.in_training = InTraining(Evaluator(tiny(10, 1), test, CPU, None), log,
                                       {"metric": "test_loss", "value": 0.41, "estimator": "causal_isotonic"})
    snapshots.take(predicting_class_0_with_loss(2.0), hold=True, step=0, wall_s=0.0, train_s=0.0, samples=0)
    assert (peer.snapshots / "step0000000.pt").exists() and not snapshots.start_needed
    snapshots.discard()
    log.close()
    assert not peer.snapshots.exists() and read_jsonl(peer.evals) == []


def test_a_look_ahead_estimator_is_refused_for_a_run_that_stops_at_its_crossing():
    from helpers import refused

    assert "eval_in_training=true stops a run at its crossing: target.estimator must be one of causal_isotonic, " \
           "confirmed_crossing" in refused("eval_in_training=true", "target.estimator=isotonic")
    assert "eval_in_training" in refused("eval_in_training=3")


@pytest.mark.parametrize("strategy, mode", [("allreduce", "in_training"), ("ring", "in_training"),
                                            ("single", "in_training"), ("localsgd", "in_training"),
                                            ("diloco", "in_training"), ("hivemind", "after_training"),
                                            ("ps", "in_training"), ("stepwise", "in_training")])
def test_strategies_whose_workers_hold_one_state_or_stop_together_evaluate_in_training_the_others_say_why(strategy,
                                                                                                         mode):
    from helpers import compose_config, strategy_of
    from job.worker import evaluation_mode

    asked = evaluation_mode(compose_config(f"strategy={strategy}"), strategy_of(strategy))  # the default
    assert asked["mode"] == mode and ("why" in asked) == (mode == "after_training")
    fixed = evaluation_mode(compose_config(f"strategy={strategy}", "eval_in_training=false"), strategy_of(strategy))
    assert fixed == {"mode": "after_training"}


def test_asynchronous_ps_evaluates_after_training_since_a_pause_would_change_its_staleness():
    from helpers import compose_config, strategy_of
    from job.worker import evaluation_mode

    asked = evaluation_mode(compose_config("strategy=ps", "ps.mode=async"), strategy_of("ps"))
    assert asked["mode"] == "after_training" and "asynchronous ps" in asked["why"]


# --- evaluation in training's pauses, shared by the machine's workers ------------------------------------------------

def pause_both(tmp_path, parameters_seeds):
    """Two workers (threads) at the pause of step 5, holding the states of their parameters_seeds."""
    test = images(40, seed=8)
    workers = [pausing_worker(tmp_path / "board", rank, [rank], test) for rank in (0, 1)]
    snapshots = [trajectory(PeerDir(tmp_path / f"peer{rank}"), [5], statistics_seed=rank,
                            parameters_seed=parameters_seeds[rank]).taken[0] for rank in (0, 1)]
    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda rank: workers[rank][0].evaluate(snapshots[rank], workers[rank][1]), (0, 1)))
    return workers, done


def test_workers_holding_one_state_at_a_pause_evaluate_it_once_on_the_cores_of_both(tmp_path):
    (first, second), ((record0, outcome0), (record1, outcome1)) = pause_both(tmp_path, [0, 0])
    assert len(first[1].states) == 1 and second[1].states == []  # rank 0 evaluated, rank 1 waited for it
    assert first[2] == [[0, 1]] and second[2] == []  # on both workers' cores
    assert (first[0].evaluated, second[0].evaluated) == (1, 0)
    posted = {k: v for k, v in record1.items() if k != "posted_at"}
    assert posted == record0 and record0["evaluated_by"] == 0 and record0["evaluated_on"] == [0, 1]
    assert np.array_equal(outcome0["correct"], outcome1["correct"])
    assert first[3] == [0] and second[3] == [1]  # each worker's whole evaluation set aside from its CPU figures


def test_workers_holding_different_states_at_a_pause_each_evaluate_their_own_on_their_own_share(tmp_path):
    (first, second), ((record0, _), (record1, _)) = pause_both(tmp_path, [0, 1])
    assert len(first[1].states) == 1 and len(second[1].states) == 1
    assert first[1].states != second[1].states
    assert (first[2], second[2]) == ([[0]], [[1]])
    assert (record0["evaluated_by"], record1["evaluated_by"]) == (0, 1)


def test_a_state_evaluated_at_an_earlier_pause_is_not_evaluated_again(tmp_path):
    sharing, evaluator, _, _ = pausing_worker(tmp_path / "board", 0, [0], images(40, seed=8))
    peer = PeerDir(tmp_path / "peer0")
    first = trajectory(peer, [5], statistics_seed=0).taken[0]
    again = trajectory(PeerDir(tmp_path / "peer1"), [5], statistics_seed=3).taken[0]  # the same parameters
    assert first.key == again.key
    sharing.evaluate(first, evaluator)
    again.clock["step"] = 10
    sharing.evaluate(again, evaluator)
    assert len(evaluator.states) == 1 and sharing.evaluated == 1
