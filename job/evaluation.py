"""Held-out evaluation, kept out of training: weights are saved during training and evaluated after it.

Every `eval_every` steps (and at step 0 and the last step) the loop pauses to save the worker's
model (state_dict: parameters and BatchNorm buffers; the model itself, not a DDP or Horovod
wrapper) to peer<RANK>/snapshots/. The pause is timed and, like any measurement pause, left out
of train_s. Once this worker's training has ended, the peer loads each snapshot into a model of
its own, recomputes its BatchNorm statistics on a fixed training subset (precise BatchNorm,
`precise_bn_samples`), and evaluates it on the whole held-out split, on the peer's own cores; then
it deletes the snapshots (keep_weights: moves them to peer<RANK>/weights/). eval.jsonl keeps the
training clock of the snapshot (step, wall_s, train_s, samples) beside the evaluation's own figures
(evaluated_at_s on the same clock, after the last step) and state_sha256, the digest of the
parameters and buffers evaluated: workers whose digests match evaluated the same model.
eval_samples.npz keeps every test sample's outcome at every evaluation (correct, loss) for the
test-set bootstrap of the crossing (metrics/target.py).

Precise BatchNorm makes the evaluated model a function of the parameters alone: BatchNorm's running
statistics, which each worker otherwise accumulates from its own batches, are replaced by the mean
over the subset's batches (of one peer's batch_size, as in training) of each batch's mean and
variance; the subset is the same for every run and every snapshot.
"""
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Subset

from job.model import state_digest
from metrics.steplog import StepLog

PRECISE_BN_SUBSET_SEED = 0  # the training subset of precise BatchNorm: the same for every run and seed


@torch.no_grad()
def evaluate(model: nn.Module, dataset, device: torch.device, batch_size: int = 256) -> tuple[dict, dict]:
    """Mean cross-entropy and accuracy on the whole held-out split, and its size; and each sample's
    outcome (correct: bool, loss: float32 arrays in the split's order)."""
    was_training = model.training
    model.eval()
    dtype = next(model.parameters()).dtype
    losses, hits = [], []
    for x, y in DataLoader(dataset, batch_size=batch_size):
        x, y = x.to(device, dtype), y.to(device)
        out = model(x)
        losses.append(nn.functional.cross_entropy(out, y, reduction="none").double().cpu())
        hits.append((out.argmax(1) == y).cpu())
    model.train(was_training)
    loss, correct = torch.cat(losses), torch.cat(hits)
    figures = {"test_loss": loss.sum().item() / len(loss), "test_accuracy": correct.sum().item() / len(correct),
               "test_samples": len(correct)}
    return figures, {"correct": correct.numpy(), "loss": loss.float().numpy()}


def batch_norm_layers(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]


class PreciseBatchNorm:
    """BatchNorm's population statistics, recomputed on a fixed training subset (see the module's docstring)."""

    def __init__(self, dataset, samples: int, batch_size: int, device: torch.device):
        order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(PRECISE_BN_SUBSET_SEED))
        batches = min(samples, len(dataset)) // batch_size
        subset = Subset(dataset, order[:batches * batch_size].tolist())
        self.batches = [x.to(device) for x, _ in DataLoader(subset, batch_size=batch_size)]

    @torch.no_grad()
    def __call__(self, model: nn.Module) -> None:
        layers = batch_norm_layers(model)
        if not layers:
            return
        momenta = [m.momentum for m in layers]
        for m in layers:
            m.reset_running_stats()
            m.momentum = None  # a cumulative mean over the batches
        was_training = model.training
        model.train()
        dtype = next(model.parameters()).dtype
        for x in self.batches:
            model(x.to(dtype=dtype))
        for m, momentum in zip(layers, momenta):
            m.momentum = momentum
        model.train(was_training)


@dataclass
class Snapshot:
    path: Path
    clock: dict  # step, wall_s, train_s, samples at the moment it was taken
    snapshot_s: float  # the training pause it cost


class Snapshots:
    """A worker's saved weights, taken during training and evaluated after it."""

    def __init__(self, directory: Path, device: torch.device):
        self.directory, self.device = directory, device
        self.taken: list[Snapshot] = []
        self.training_started = 0.0  # perf_counter at the start of training: the clock of wall_s

    def take(self, model: nn.Module, **clock) -> float:
        """Save the model's state now; returns the seconds it paused training."""
        started = time.perf_counter()
        self.training_started = started - clock["wall_s"]
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"step{clock['step']:07d}.pt"
        torch.save(model.state_dict(), path)
        paused = time.perf_counter() - started
        self.taken.append(Snapshot(path, clock, paused))
        return paused

    def evaluate_all(self, model: nn.Module, dataset, log: StepLog, precise: PreciseBatchNorm | None,
                     samples_path: Path, keep_in: Path | None = None) -> dict:
        """Evaluate every snapshot in `model` (not the trained one), after precise BatchNorm where given; log each
        to eval.jsonl, every test sample's outcome to samples_path; delete the snapshot (or move it into keep_in)."""
        started = time.perf_counter()
        outcomes = []
        for snapshot in self.taken:
            t0 = time.perf_counter()
            model.load_state_dict(torch.load(snapshot.path, map_location=self.device, weights_only=True))
            loaded = time.perf_counter()
            if precise:
                precise(model)
            recomputed = time.perf_counter()
            figures, outcome = evaluate(model, dataset, self.device)
            done = time.perf_counter()
            log.eval(**snapshot.clock, **figures, state_sha256=state_digest(model), precise_bn_s=recomputed - loaded,
                     eval_s=done - t0, snapshot_s=snapshot.snapshot_s, evaluated_at_s=done - self.training_started)
            outcomes.append(outcome)
            if keep_in:
                keep_in.mkdir(parents=True, exist_ok=True)
                snapshot.path.rename(keep_in / snapshot.path.name)
            else:
                snapshot.path.unlink()
        if outcomes:
            np.savez_compressed(samples_path, step=np.array([s.clock["step"] for s in self.taken]),
                                correct=np.stack([o["correct"] for o in outcomes]),
                                loss=np.stack([o["loss"] for o in outcomes]))
        self.discard()
        return {"evaluations": len(self.taken), "eval_s": time.perf_counter() - started,
                "snapshot_s": sum(s.snapshot_s for s in self.taken)}

    def discard(self) -> None:
        """Delete what is left (after a failure, nothing is evaluated)."""
        for snapshot in self.taken:
            snapshot.path.unlink(missing_ok=True)
        if self.directory.exists() and not any(self.directory.iterdir()):
            self.directory.rmdir()
