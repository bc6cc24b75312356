"""Datasets by config name, disjoint per-peer shards, and an endless batch stream."""
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Sampler, TensorDataset

from job.errors import ConfigError
from job.torchvision_guard import import_torchvision


@dataclass
class Splits:
    train: Dataset
    test: Dataset
    num_classes: int
    channels: int
    synthetic: bool = False


def _split(images: torch.Tensor, labels: torch.Tensor, test_fraction: float, split_seed: int):
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(split_seed))
    n_test = int(round(len(labels) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return TensorDataset(images[train], labels[train]), TensorDataset(images[test], labels[test])


def digits(cfg) -> Splits:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0
    images = F.interpolate(images, size=cfg.image_size, mode="bilinear", align_corners=False)
    images = (images - images.mean()) / images.std()
    labels = torch.tensor(bunch.target, dtype=torch.long)
    train, test = _split(images, labels, cfg.test_fraction, cfg.split_seed)
    return Splits(train, test, num_classes=10, channels=1)


def synthetic(cfg) -> Splits:
    gen = torch.Generator().manual_seed(cfg.split_seed)
    images = torch.randn(cfg.num_samples, cfg.channels, cfg.image_size, cfg.image_size, generator=gen)
    labels = torch.randint(0, cfg.num_classes, (cfg.num_samples,), generator=gen)
    train, test = _split(images, labels, cfg.test_fraction, cfg.split_seed)
    return Splits(train, test, num_classes=cfg.num_classes, channels=cfg.channels, synthetic=True)


def _image_transform(cfg, mean, std):
    transforms = import_torchvision().transforms
    return transforms.Compose(
        [transforms.Resize((cfg.image_size, cfg.image_size)), transforms.ToTensor(), transforms.Normalize(mean, std)]
    )


def cifar10(cfg) -> Splits:
    datasets = import_torchvision().datasets
    tf = _image_transform(cfg, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
    root = str(cfg.root)
    train = datasets.CIFAR10(root, train=True, transform=tf, download=bool(cfg.download))
    test = datasets.CIFAR10(root, train=False, transform=tf, download=False)
    return Splits(train, test, num_classes=10, channels=3)


def imagefolder(cfg) -> Splits:
    datasets = import_torchvision().datasets
    tf = _image_transform(cfg, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    train = datasets.ImageFolder(str(Path(cfg.root) / "train"), transform=tf)
    test = datasets.ImageFolder(str(Path(cfg.root) / "test"), transform=tf)
    return Splits(train, test, num_classes=len(train.classes), channels=3)


DATASETS = {"digits": digits, "synthetic": synthetic, "cifar10": cifar10, "imagefolder": imagefolder}


def check_data_config(data_cfg) -> None:
    """Fail before launch when a dataset root is missing."""
    if data_cfg.name == "cifar10":
        root = Path(str(data_cfg.root))
        if not data_cfg.download and not (root / "cifar-10-batches-py").is_dir():
            raise ConfigError(
                f"data.root={root} holds no cifar-10-batches-py; point it at an extracted CIFAR-10 "
                "or add data.download=true on a machine with network access"
            )
    if data_cfg.name == "imagefolder":
        for split in ("train", "test"):
            if not (Path(str(data_cfg.root)) / split).is_dir():
                raise ConfigError(f"data.root={data_cfg.root} has no '{split}/' folder of class subfolders")


def load_splits(cfg) -> Splits:
    return DATASETS[cfg.data.name](cfg.data)


class ShardSampler(Sampler):
    """This peer's disjoint shard of the training set, reshuffled every epoch.

    The dataset is permuted once with the run's seed (same on every peer) and
    peer r takes positions r, r+P, r+2P, ...: shards are disjoint and together
    cover all but fewer than P samples.
    """

    def __init__(self, size: int, rank: int, peers: int, seed: int):
        order = torch.randperm(size, generator=torch.Generator().manual_seed(seed))
        self.indices = order[rank::peers][: size // peers]
        self.seed, self.rank, self.epoch = seed, rank, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.rank * 7919 + self.epoch)
        return iter(self.indices[torch.randperm(len(self.indices), generator=gen)].tolist())

    def __len__(self) -> int:
        return len(self.indices)


def batches(dataset: Dataset, sampler: ShardSampler, batch_size: int, num_workers: int):
    """Endless stream of full batches from this peer's shard."""
    if len(sampler) < batch_size:
        raise ConfigError(f"a peer's shard has {len(sampler)} samples, fewer than batch_size={batch_size}")
    loader = DataLoader(
        dataset, batch_size=batch_size, sampler=sampler, drop_last=True,
        num_workers=num_workers, persistent_workers=num_workers > 0,
    )
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1
