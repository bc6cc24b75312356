"""Evaluation after training (unit tier): precise BatchNorm makes the evaluated model a function of its
parameters alone, so that workers with equal parameters evaluate equally; every test sample's outcome is kept
for the bootstrap; evaluated weights are deleted or kept."""
import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from job.evaluation import PreciseBatchNorm, Snapshots, evaluate
from job.model import GhostBatchNorm2d, state_digest, tiny
from metrics.jsonl import read_jsonl
from metrics.rundir import PeerDir
from metrics.steplog import StepLog

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
    snapshots, log = Snapshots(peer.snapshots, CPU), StepLog(peer.path)
    snapshots.take(model, step=0, wall_s=0.0, train_s=0.0, samples=0)
    trained_on(model, images(64, seed=7))
    with torch.no_grad():
        model[-1].bias += 1.0
    snapshots.take(model, step=5, wall_s=1.0, train_s=0.9, samples=160)
    test = images(40, seed=8)
    precise = PreciseBatchNorm(images(64, seed=9), samples=64, batch_size=32, device=CPU)
    done = snapshots.evaluate_all(tiny(10, 1), test, log, precise, peer.eval_samples, peer.weights if keep else None)
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
