"""Held-out evaluation, kept out of training: weights are saved during training and evaluated after it.

Every `eval_every` steps (and at step 0 and the last step) the loop pauses to save the worker's
model (state_dict: parameters and BatchNorm buffers; the model itself, not a DDP or Horovod
wrapper) to peer<RANK>/snapshots/. The pause is timed and, like any measurement pause, left out
of train_s. Once this worker's training has ended, the peer loads each snapshot into a model of
its own and evaluates it on the whole held-out split, on the peer's own cores, then deletes the
snapshots. eval.jsonl keeps the training clock of the snapshot (step, wall_s, train_s, samples)
beside the evaluation's own figures (evaluated_at_s on the same clock, after the last step).
"""
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader

from metrics.steplog import StepLog


@torch.no_grad()
def evaluate(model: nn.Module, dataset, device: torch.device, batch_size: int = 256) -> dict:
    """Mean cross-entropy and accuracy on the whole held-out split, and its size."""
    was_training = model.training
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    for x, y in DataLoader(dataset, batch_size=batch_size):
        x, y = x.to(device), y.to(device)
        out = model(x)
        loss_sum += nn.functional.cross_entropy(out, y, reduction="sum").item()
        correct += (out.argmax(1) == y).sum().item()
        count += len(y)
    model.train(was_training)
    return {"test_loss": loss_sum / count, "test_accuracy": correct / count, "test_samples": count}


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

    def evaluate_all(self, model: nn.Module, dataset, log: StepLog) -> dict:
        """Evaluate every snapshot in `model` (not the trained one), log each to eval.jsonl and delete it."""
        started = time.perf_counter()
        for snapshot in self.taken:
            t0 = time.perf_counter()
            model.load_state_dict(torch.load(snapshot.path, map_location=self.device, weights_only=True))
            figures = evaluate(model, dataset, self.device)
            done = time.perf_counter()
            log.eval(**snapshot.clock, **figures, eval_s=done - t0, snapshot_s=snapshot.snapshot_s,
                     evaluated_at_s=done - self.training_started)
            snapshot.path.unlink()
        self.discard()
        return {"evaluations": len(self.taken), "eval_s": time.perf_counter() - started,
                "snapshot_s": sum(s.snapshot_s for s in self.taken)}

    def discard(self) -> None:
        """Delete what is left (after a failure, nothing is evaluated)."""
        for snapshot in self.taken:
            snapshot.path.unlink(missing_ok=True)
        if self.directory.exists() and not any(self.directory.iterdir()):
            self.directory.rmdir()
