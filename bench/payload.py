"""A compute-free twin of model=mlp: the same parameters, in the same shapes and order (so the same payload and the
same buckets), with a forward that skips their arithmetic. A step's time is then the averaging's and the update's."""
import torch
from torch import nn

from job.model import mlp


class ComputeFreeTwin(nn.Module):
    def __init__(self, model: nn.Module, num_classes: int) -> None:
        super().__init__()
        self.model = model
        self.num_classes = num_classes

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        touched = sum(p.sum() for p in self.model.parameters()) * 0.0  # each parameter gets a (zero) gradient
        return images.new_zeros(images.shape[0], self.num_classes) + touched


def mlp_twin(num_classes: int, channels: int, **options: int) -> nn.Module:
    """model=custom model.target=bench.payload:mlp_twin +model.options.width=W: model=mlp model.width=W's twin."""
    return ComputeFreeTwin(mlp(num_classes, channels, **options), num_classes)
