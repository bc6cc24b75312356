"""Models, by config name."""
from torch import nn

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
        nn.Conv2d(channels, 16, 3, padding=1, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1, bias=False),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(32 * 16, num_classes),
    )


def mlp(num_classes: int, channels: int, width: int = 1024) -> nn.Module:
    """Two hidden layers of `width` on a 16x16 pooled image: payload set by width, little compute.

    For communication benchmarks: about width^2 + 256 x channels x width parameters.
    """
    return nn.Sequential(
        nn.AdaptiveAvgPool2d(16),
        nn.Flatten(),
        nn.Linear(channels * 256, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, num_classes),
    )


MODELS = {"resnet18": resnet18, "tiny": tiny, "mlp": mlp}


def build_model(cfg, num_classes: int, channels: int) -> nn.Module:
    options = {k: v for k, v in cfg.model.items() if k != "name"}
    return MODELS[cfg.model.name](num_classes, channels, **options)


def parameter_digest(model: nn.Module) -> str:
    """SHA-256 of all parameters' bytes: equal digests mean bit-identical parameters."""
    import hashlib

    digest = hashlib.sha256()
    for param in model.parameters():
        digest.update(param.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()
