"""The training loop, identical for every strategy."""
import time

import torch
from torch import nn
from torch.utils.data import DataLoader

from job.data import ShardSampler, batches
from job.fault import inject
from metrics.sampler import WireCounter
from metrics.steplog import StepLog
from strategies.base import Strategy


@torch.no_grad()
def evaluate(model: nn.Module, dataset, batch_size: int = 256) -> tuple[float, float]:
    """Mean cross-entropy and accuracy on the whole held-out split."""
    was_training = model.training
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    for x, y in DataLoader(dataset, batch_size=batch_size):
        out = model(x)
        loss_sum += nn.functional.cross_entropy(out, y, reduction="sum").item()
        correct += (out.argmax(1) == y).sum().item()
        count += len(y)
    model.train(was_training)
    return loss_sum / count, correct / count


def train(cfg, strategy: Strategy, model: nn.Module, splits, log: StepLog, rank: int) -> dict:
    """Run the strategy's step limit (max_steps) or until it stops; log every step and evaluation."""
    sampler = ShardSampler(len(splits.train), rank, cfg.peers, cfg.seed)
    stream = batches(splits.train, sampler, cfg.batch_size, cfg.data.num_workers)
    criterion = nn.CrossEntropyLoss()
    start = time.perf_counter()
    eval_total = 0.0
    samples = 0

    def run_eval(step: int) -> None:
        nonlocal eval_total
        t0 = time.perf_counter()
        test_loss, test_accuracy = evaluate(model, splits.test)
        eval_s = time.perf_counter() - t0
        eval_total += eval_s
        wall = time.perf_counter() - start
        log.eval(step=step, wall_s=wall, train_s=wall - eval_total, samples=samples,
                 test_loss=test_loss, test_accuracy=test_accuracy, eval_s=eval_s)

    model.train()
    run_eval(0)
    wire = WireCounter() if cfg.network.name == "emulated" else None  # this peer's own interface
    step = 0
    last_step = strategy.step_limit()
    for step in range(1, last_step + 1):
        inject(cfg.fault, rank, step, log.peer_dir)
        t0 = time.perf_counter()
        x, y = next(stream)
        t1 = time.perf_counter()
        strategy.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        t2 = time.perf_counter()
        report = strategy.step(len(y))
        samples += len(y)
        wall = time.perf_counter() - start
        log.step(step=step, wall_s=wall, train_s=wall - eval_total, samples=samples, loss=loss.item(),
                 data_s=t1 - t0, compute_s=t2 - t1, comm_s=report.comm_s, opt_s=report.opt_s,
                 bytes_sent=report.bytes_sent, bytes_recv=report.bytes_recv, **report.extra,
                 **(wire.since_start() if wire else {}))
        stopping = strategy.should_stop(step)
        if stopping or step == last_step or (cfg.eval_every and step % cfg.eval_every == 0):
            run_eval(step)
        if stopping:
            break
    return {"steps": step, "samples": samples, "eval_s": eval_total}
