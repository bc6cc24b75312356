"""Shards, data sets and models."""
import subprocess
import sys

import pytest
import torch
from omegaconf import OmegaConf

from helpers import ROOT, TINY_DIGITS_PARAMS
from job.data import ShardSampler, digits, synthetic
from job.model import parameter_digest, resnet18, tiny

pytestmark = pytest.mark.timeout(120)


def test_shards_are_disjoint_and_cover_the_set():
    size, peers = 1437, 4
    shards = [set(ShardSampler(size, r, peers, seed=7).indices.tolist()) for r in range(peers)]
    for a in range(peers):
        for b in range(a + 1, peers):
            assert not shards[a] & shards[b]
    covered = set().union(*shards)
    assert len(covered) >= size - peers + 1 and covered <= set(range(size))
    assert len({len(s) for s in shards}) == 1  # equal shards: equal steps per epoch


def test_shard_reshuffles_each_epoch_within_itself():
    sampler = ShardSampler(1000, rank=1, peers=2, seed=0)
    first = list(sampler)
    sampler.set_epoch(1)
    second = list(sampler)
    assert first != second and sorted(first) == sorted(second)


def test_digits_is_real_and_split_by_seed():
    cfg = OmegaConf.create({"image_size": 32, "test_fraction": 0.2, "split_seed": 0})
    splits = digits(cfg)
    x, y = splits.train.tensors
    assert x.shape[1:] == (1, 32, 32) and len(splits.train) + len(splits.test) == 1797
    assert set(y.tolist()) == set(range(10)) and not splits.synthetic
    again = digits(cfg)
    assert torch.equal(again.test.tensors[1], splits.test.tensors[1])


def test_synthetic_is_labelled():
    cfg = OmegaConf.create({"num_samples": 64, "num_classes": 4, "channels": 3, "image_size": 8,
                            "test_fraction": 0.25, "split_seed": 0})
    assert synthetic(cfg).synthetic


def test_resnet18_small_image_form():
    model = resnet18(num_classes=10, channels=1)
    assert model.conv1.kernel_size == (3, 3) and model.conv1.stride == (1, 1)
    assert isinstance(model.maxpool, torch.nn.Identity)
    assert 11_000_000 < sum(p.numel() for p in model.parameters()) < 11_300_000
    assert model(torch.randn(2, 1, 32, 32)).shape == (2, 10)
    assert tiny(10, 3)(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_tiny_model_has_the_hand_counted_parameters():
    """The integration tests' byte expectations use this hand count (tests/helpers.py)."""
    assert sum(p.numel() for p in tiny(10, 1).parameters() if p.requires_grad) == TINY_DIGITS_PARAMS == 9978


def test_parameter_digest_sees_one_changed_value():
    torch.manual_seed(0)
    a = tiny(10, 1)
    torch.manual_seed(0)
    b = tiny(10, 1)
    assert parameter_digest(a) == parameter_digest(b)
    with torch.no_grad():
        b[-1].bias[3] += 1e-6
    assert parameter_digest(a) != parameter_digest(b)


@pytest.mark.integration
def test_torchvision_guard_warns_once_and_models_work():
    code = (
        "import warnings\n"
        "warnings.simplefilter('always')\n"
        "from job.torchvision_guard import compiled_ops_load, import_torchvision\n"
        "ok = compiled_ops_load()\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    import_torchvision(); import_torchvision()\n"
        "import torchvision\n"
        "torchvision.models.resnet18(num_classes=3)\n"
        "n = sum('compiled ops' in str(w.message) for w in caught)\n"
        "print(ok, n)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    ops_load, warnings_seen = out.stdout.split()
    assert warnings_seen == ("0" if ops_load == "True" else "1")
