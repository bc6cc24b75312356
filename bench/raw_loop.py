"""A minimal raw PyTorch training loop, the reference for framework overhead. A step's time runs from the end of the
previous step (data loading included), like the framework's step log.

    python -m bench.raw_loop MODEL BATCH STEPS THREADS [MODE]  -> rank 0 prints `step_s SECONDS` for each step
    (MODEL: a built-in model's name, or your model's package.module:function, as model.target)

MODE: plain (one process), ddp (torch DDP over gloo, started by torch.distributed.run) or horovod (hvd.init,
DistributedOptimizer, broadcast; started by horovodrun). Each rank is pinned to its cores as a framework peer is.
"""
import os
import sys
import time
from collections.abc import Callable
from typing import cast

import torch
from omegaconf import OmegaConf
from torch.utils.data import DataLoader

from job.data import digits
from job.model import MODELS, custom
from job.process import pin_cpus


def main(model_name: str, batch: int, steps: int, threads: int, mode: str = "plain") -> None:
    pin_cpus(int(os.environ.get("LOCAL_RANK") or os.environ.get("HOROVOD_LOCAL_RANK") or 0), threads)
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    splits = digits(OmegaConf.create({"image_size": 32, "test_fraction": 0.2, "split_seed": 0}))
    # job.model.MODELS is unannotated: mypy infers dict[str, function], whose values it cannot call
    model = (cast(Callable[..., torch.nn.Module], MODELS[model_name])(splits.num_classes, splits.channels)
             if model_name in MODELS and model_name != "custom"
             else custom(splits.num_classes, splits.channels, target=model_name))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    rank = 0
    if mode == "ddp":
        torch.distributed.init_process_group("gloo")  # MASTER_ADDR/PORT, RANK, WORLD_SIZE from the launcher
        rank, model = torch.distributed.get_rank(), torch.nn.parallel.DistributedDataParallel(model)
    elif mode == "horovod":
        import horovod.torch as hvd

        hvd.init()
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        rank, optimizer = hvd.rank(), hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    criterion = torch.nn.CrossEntropyLoss()
    done, last = 0, time.perf_counter()
    while done < steps:
        for x, y in DataLoader(splits.train, batch_size=batch, shuffle=True, drop_last=True):
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
            now = time.perf_counter()
            if rank == 0:
                print(f"step_s {now - last}", flush=True)
            last, done = now, done + 1
            if done == steps:
                break
    if mode == "ddp":  # no rank leaves while the other's gloo threads still talk to it
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    name, batch, steps, threads, *mode = sys.argv[1:]
    main(name, int(batch), int(steps), int(threads), *mode)
