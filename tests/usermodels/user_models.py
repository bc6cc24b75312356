"""A user's models, outside the project's code: the tests put this folder on PYTHONPATH and name them in
model.target (model=custom model.target=user_models:NAME)."""
from torch import nn


class SmallNet(nn.Module):
    """A user's CNN as a class of its own: conv, BatchNorm, pooling, a linear head of `hidden` units."""

    def __init__(self, num_classes: int, channels: int, hidden: int = 8):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(channels, hidden, 3, padding=1, bias=False), nn.BatchNorm2d(hidden),
                                      nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten())
        self.head = nn.Linear(hidden * 4, num_classes)

    def forward(self, x):
        return self.head(self.features(x))


def build(num_classes: int, channels: int, hidden: int = 8) -> nn.Module:
    return SmallNet(num_classes, channels, hidden)


def seven_classes(num_classes: int, channels: int) -> nn.Module:
    """Ignores num_classes: scores 7 classes whatever the data has."""
    return SmallNet(7, channels)


def not_a_module(num_classes: int, channels: int):
    return "a string"


def frozen(num_classes: int, channels: int) -> nn.Module:
    model = SmallNet(num_classes, channels)
    model.requires_grad_(False)
    return model


NOT_CALLABLE = 3


def gray_only(num_classes: int, channels: int) -> nn.Module:
    """Ignores channels: takes one-channel images whatever the data has."""
    return SmallNet(num_classes, 1)


def frozen_batch_norm(num_classes: int, channels: int, hidden: int = 8) -> nn.Module:
    """Fine-tuning style: BatchNorm's scale and shift stay as initialised."""
    model = SmallNet(num_classes, channels, hidden)
    model.features[1].requires_grad_(False)
    return model


def fails_loudly(num_classes: int, channels: int) -> nn.Module:
    raise ValueError("first line\nsecond line")
