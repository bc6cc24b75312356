"""Datasets by config name, and the sample order every run of a seed shares."""
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, TypeAlias

import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch.utils.data import DataLoader, Sampler, TensorDataset

from job.errors import ConfigError
from job.torchvision_guard import import_torchvision

if TYPE_CHECKING:  # torchvision ships no type information: Any to mypy
    from torchvision.datasets import VisionDataset
Samples: TypeAlias = "TensorDataset | VisionDataset"  # a split: (image, label) by index


@dataclass
class Splits:
    train: Samples
    test: Samples
    num_classes: int
    channels: int
    synthetic: bool = False


FIXED_SHAPES = {"digits": (10, 1), "cifar10": (10, 3)}  # (classes, channels) of the datasets that fix them
IMAGEFOLDER_CHANNELS = 3  # ImageFolder loads RGB


def _split(images: torch.Tensor, labels: torch.Tensor, test_fraction: float,
           split_seed: int) -> tuple[TensorDataset, TensorDataset]:
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(split_seed))
    n_test = int(round(len(labels) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return TensorDataset(images[train], labels[train]), TensorDataset(images[test], labels[test])


def digits(cfg: DictConfig) -> Splits:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0
    images = F.interpolate(images, size=cfg.image_size, mode="bilinear", align_corners=False)
    images = (images - images.mean()) / images.std()
    labels = torch.tensor(bunch.target, dtype=torch.long)
    train, test = _split(images, labels, cfg.test_fraction, cfg.split_seed)
    return Splits(train, test, *FIXED_SHAPES["digits"])


def synthetic(cfg: DictConfig) -> Splits:
    gen = torch.Generator().manual_seed(cfg.split_seed)
    images = torch.randn(cfg.num_samples, cfg.channels, cfg.image_size, cfg.image_size, generator=gen)
    labels = torch.randint(0, cfg.num_classes, (cfg.num_samples,), generator=gen)
    train, test = _split(images, labels, cfg.test_fraction, cfg.split_seed)
    return Splits(train, test, num_classes=cfg.num_classes, channels=cfg.channels, synthetic=True)


def _image_transform(cfg: DictConfig, mean: tuple[float, ...],
                     std: tuple[float, ...]) -> Callable[[Any], torch.Tensor]:
    transforms = import_torchvision().transforms
    return transforms.Compose([transforms.Resize((cfg.image_size, cfg.image_size)), transforms.ToTensor(),
                               transforms.Normalize(mean, std)])


def cifar10(cfg: DictConfig) -> Splits:
    datasets = import_torchvision().datasets
    tf = _image_transform(cfg, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
    root = str(cfg.root)
    train = datasets.CIFAR10(root, train=True, transform=tf, download=bool(cfg.download))
    test = datasets.CIFAR10(root, train=False, transform=tf, download=False)
    return Splits(train, test, *FIXED_SHAPES["cifar10"])


def imagefolder(cfg: DictConfig) -> Splits:
    datasets = import_torchvision().datasets
    tf = _image_transform(cfg, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    train = datasets.ImageFolder(str(Path(cfg.root) / "train"), transform=tf)
    test = datasets.ImageFolder(str(Path(cfg.root) / "test"), transform=tf)
    return Splits(train, test, num_classes=len(train.classes), channels=IMAGEFOLDER_CHANNELS)


DATASETS = {"digits": digits, "synthetic": synthetic, "cifar10": cifar10, "imagefolder": imagefolder}


def check_data_config(data_cfg: DictConfig) -> None:
    if data_cfg.name == "cifar10":
        root = Path(str(data_cfg.root))
        if not data_cfg.download and not (root / "cifar-10-batches-py").is_dir():
            raise ConfigError(f"data.root={root} holds no cifar-10-batches-py; point it at an extracted CIFAR-10 "
                              "or add data.download=true on a machine with network access")
    if data_cfg.name == "imagefolder":
        for split in ("train", "test"):
            if not (Path(str(data_cfg.root)) / split).is_dir():
                raise ConfigError(f"data.root={data_cfg.root} has no '{split}/' folder of class subfolders")


def data_shape(data_cfg: DictConfig) -> tuple[int, int, int]:
    """(classes, channels, image side) of a dataset's batches from its config alone (nothing loaded)."""
    if data_cfg.name == "synthetic":
        return int(data_cfg.num_classes), int(data_cfg.channels), int(data_cfg.image_size)
    if data_cfg.name == "imagefolder":
        classes = [p for p in (Path(str(data_cfg.root)) / "train").iterdir() if p.is_dir()]
        return len(classes), IMAGEFOLDER_CHANNELS, int(data_cfg.image_size)
    return (*FIXED_SHAPES[data_cfg.name], int(data_cfg.image_size))


def load_splits(cfg: DictConfig) -> Splits:
    return DATASETS[cfg.data.name](cfg.data)


class GlobalOrder(Sampler[list[int]]):
    """This worker's batches of dataset indices from a seed's endless sample order (docs/runs.md: One sample order)."""

    def __init__(self, size: int, rank: int, workers: int, batch_size: int, seed: int):
        if size < workers * batch_size:
            raise ConfigError(f"the training set has {size} samples, fewer than a global batch of {workers} "
                              f"workers x {batch_size}")
        self.size, self.rank, self.workers, self.batch_size, self.seed = size, rank, workers, batch_size, seed
        self.permutations: dict[int, torch.Tensor] = {}

    def epoch(self, epoch: int) -> torch.Tensor:
        """The permutation of epoch `epoch` (the last two are kept: a slice may straddle an epoch boundary)."""
        if epoch not in self.permutations:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self.permutations = {e: p for e, p in self.permutations.items() if e == epoch - 1}
            self.permutations[epoch] = torch.randperm(self.size, generator=generator)
        return self.permutations[epoch]

    def positions(self, start: int, count: int) -> list[int]:
        """Dataset indices at stream positions start .. start + count - 1."""
        return [int(self.epoch(p // self.size)[p % self.size]) for p in range(start, start + count)]

    def batch(self, step: int) -> list[int]:
        """This worker's indices at step `step` (from 0): sub-slice `rank` of global slice `step`."""
        return self.positions((step * self.workers + self.rank) * self.batch_size, self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        return map(self.batch, itertools.count())


def batches(dataset: Samples, order: GlobalOrder, num_workers: int) -> Iterator[list[torch.Tensor]]:
    loader = DataLoader(dataset, batch_sampler=order, num_workers=num_workers, persistent_workers=num_workers > 0)
    yield from loader
