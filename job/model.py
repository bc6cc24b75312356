"""Models, by config name, in the precision `dtype`, with ghost BatchNorm (`ghost_batch_norm`); a user's own model
by file, import path or entry point (`model=custom model.target=...`), checked against the data before launch."""
import hashlib
from importlib.metadata import entry_points
from typing import Any, Callable, Iterable

import torch
from omegaconf import DictConfig
from torch import nn

from job.data import data_shape
from job.errors import ConfigError
from job.registry import resolve
from job.torchvision_guard import import_torchvision


def resnet18(num_classes: int, channels: int) -> nn.Module:
    """torchvision ResNet18 in its small-image form: 3x3 stride-1 stem, no max-pool."""
    model = import_torchvision().models.resnet18(num_classes=num_classes)
    model.conv1 = nn.Conv2d(channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    return model


def tiny(num_classes: int, channels: int) -> nn.Module:
    """A 10k-parameter CNN (with BatchNorm, like ResNet) for tests."""
    return nn.Sequential(
        nn.Conv2d(channels, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
        nn.Flatten(), nn.Linear(32 * 16, num_classes))


def mlp(num_classes: int, channels: int, width: int = 1024) -> nn.Module:
    """Two hidden layers of `width` on a 16x16 pooled image (width^2 + 256 x channels x width parameters)."""
    return nn.Sequential(nn.AdaptiveAvgPool2d(16), nn.Flatten(), nn.Linear(channels * 256, width), nn.ReLU(),
                         nn.Linear(width, width), nn.ReLU(), nn.Linear(width, num_classes))


ENTRY_POINT_GROUP = "avgbench.models"  # an installed package's models, by entry-point name


def _failure(exc: Exception) -> str:
    """A user code's exception as one line: its type and message."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def model_builder(target: str) -> Callable[..., object]:
    """model.target's callable: '/path/to/file.py:function', 'package.module:function', or an avgbench.models entry
    point's name."""
    if ":" in target:
        try:
            builder = resolve(target)
        except Exception as exc:  # a user's module may fail in any way: say which and why, before launch
            raise ConfigError(f"model.target={target}: cannot import it ({_failure(exc)}); is it a file's absolute "
                              "path, or a module installed or on PYTHONPATH?") from None
    else:
        found = [e for e in entry_points(group=ENTRY_POINT_GROUP) if e.name == target]
        if not found:
            names = sorted(e.name for e in entry_points(group=ENTRY_POINT_GROUP))
            raise ConfigError(f"model.target={target} is neither package.module:function nor an entry point of "
                              f"{ENTRY_POINT_GROUP} (installed: {', '.join(names) or 'none'})")
        builder = found[0].load()
    if not callable(builder):
        raise ConfigError(f"model.target={target} is a {type(builder).__name__}, not a callable that builds a model")
    return builder


def custom(num_classes: int, channels: int, target: str, options: dict | None = None) -> nn.Module:
    """model.target's callable(num_classes, channels, **model.options) -> nn.Module."""
    model = model_builder(target)(num_classes, channels, **(options or {}))
    if not isinstance(model, nn.Module):
        raise ConfigError(f"model.target={target} returned a {type(model).__name__}, not a torch.nn.Module")
    return model


MODELS: dict[str, Callable[..., nn.Module]] = {"resnet18": resnet18, "tiny": tiny, "mlp": mlp, "custom": custom}
DTYPES = {"float32": torch.float32, "float64": torch.float64}


class GhostBatchNorm2d(nn.BatchNorm2d):
    """Ghost BatchNorm: in training, each `group` samples of a batch are normalised on their own; else plain."""

    def __init__(self, num_features: int, group: int, **kwargs: Any):
        super().__init__(num_features, **kwargs)
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or len(x) <= self.group:
            return super().forward(x)
        return torch.cat([nn.BatchNorm2d.forward(self, part) for part in x.split(self.group)])


def with_ghost_batch_norm(model: nn.Module, group: int) -> nn.Module:
    """Every BatchNorm2d replaced by a GhostBatchNorm2d of `group` samples, state and frozen parameters kept."""
    for name, child in model.named_children():
        if type(child) is nn.BatchNorm2d:
            ghost = GhostBatchNorm2d(child.num_features, group, eps=child.eps, momentum=child.momentum,
                                     affine=child.affine, track_running_stats=child.track_running_stats)
            ghost.load_state_dict(child.state_dict())
            for param_name, param in child.named_parameters(recurse=False):  # a frozen BatchNorm stays frozen
                getattr(ghost, param_name).requires_grad_(param.requires_grad)
            setattr(model, name, ghost)
        else:
            with_ghost_batch_norm(child, group)
    return model


def build_model(cfg: DictConfig, num_classes: int, channels: int) -> nn.Module:
    """The model the config names in cfg.dtype, with ghost BatchNorm of one peer's batch where asked."""
    options = {k: v for k, v in cfg.model.items() if k != "name"}
    model = MODELS[cfg.model.name](num_classes, channels, **options)
    if cfg.ghost_batch_norm:
        model = with_ghost_batch_norm(model, int(cfg.batch_size))
    return model.to(DTYPES[cfg.dtype])


def check_model(cfg: DictConfig) -> None:
    """model=custom builds, has trainable parameters and gives one score per class; else a ConfigError saying what."""
    if cfg.model.name != "custom":
        return
    num_classes, channels, side = data_shape(cfg.data)
    target = cfg.model.target
    try:
        model = build_model(cfg, num_classes, channels)
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"model.target={target}: building it for {num_classes} classes and {channels} channels "
                          f"failed ({_failure(exc)})") from None
    if not any(p.requires_grad for p in model.parameters()):
        raise ConfigError(f"model.target={target} has no trainable parameters: there is nothing to average")
    shape = (2, channels, side, side)
    model.eval()
    try:
        with torch.no_grad():
            out = model(torch.zeros(shape, dtype=DTYPES[cfg.dtype]))
    except Exception as exc:
        raise ConfigError(f"model.target={target}: its forward on a batch of shape {shape} (data.name="
                          f"{cfg.data.name}) failed ({_failure(exc)})") from None
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (2, num_classes):
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ConfigError(f"model.target={target} maps a batch of shape {shape} to {got}, but data.name="
                          f"{cfg.data.name} has {num_classes} classes: it must give (batch, {num_classes}) scores")


def _digest(tensors: Iterable[torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for tensor in tensors:
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def parameter_digest(model: nn.Module) -> str:
    """SHA-256 of all parameters' bytes: equal digests mean bit-identical parameters."""
    return _digest(model.parameters())


def state_digest(model: nn.Module, leave_out: frozenset[str] = frozenset()) -> str:
    """SHA-256 of the state_dict's tensors but `leave_out`: equal digests mean a bit-identical model."""
    return _digest(v for k, v in model.state_dict().items() if k not in leave_out)
