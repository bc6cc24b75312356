"""A minimal raw PyTorch training loop, the reference for framework overhead. A step's time runs from the end of the
previous step (data loading included), like the framework's step log.

    python -m bench.raw_loop MODEL BATCH STEPS THREADS CORE  -> prints each step's seconds, one per line
    (MODEL: a built-in model's name, or your model's package.module:function, as model.target)
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


def main(model_name: str, batch: int, steps: int, threads: int, core: int) -> None:
    os.sched_setaffinity(0, {core})
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    splits = digits(OmegaConf.create({"image_size": 32, "test_fraction": 0.2, "split_seed": 0}))
    # job.model.MODELS is unannotated: mypy infers dict[str, function], whose values it cannot call
    model = (cast(Callable[..., torch.nn.Module], MODELS[model_name])(splits.num_classes, splits.channels)
             if model_name in MODELS and model_name != "custom"
             else custom(splits.num_classes, splits.channels, target=model_name))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    criterion = torch.nn.CrossEntropyLoss()
    done, last = 0, time.perf_counter()
    while done < steps:
        for x, y in DataLoader(splits.train, batch_size=batch, shuffle=True, drop_last=True):
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
            now = time.perf_counter()
            print(now - last, flush=True)
            last, done = now, done + 1
            if done == steps:
                break


if __name__ == "__main__":
    name, *numbers = sys.argv[1:]
    main(name, *map(int, numbers))
