"""The shared sample order, data sets and models (ghost BatchNorm, precision)."""

import pytest
import torch
from omegaconf import OmegaConf

from helpers import TINY_DIGITS_PARAMS
from torch.utils.data import TensorDataset

from job.data import GlobalOrder, batches, digits, synthetic
from job.errors import ConfigError
from job.model import GhostBatchNorm2d, build_model, parameter_digest, resnet18, tiny

pytestmark = pytest.mark.timeout(120)


def stream(size: int, workers: int, batch_size: int, seed: int, steps: int) -> list[int]:
    """The indices a run's workers train, step after step, worker after worker."""
    orders = [GlobalOrder(size, r, workers, batch_size, seed) for r in range(workers)]
    return [i for t in range(steps) for order in orders for i in order.batch(t)]


def test_two_peers_take_the_halves_of_what_one_process_takes_at_every_step():
    size = 1437  # 60 steps of 64 run through more than two epochs, one slice straddling each boundary
    baseline = GlobalOrder(size, rank=0, workers=1, batch_size=64, seed=3)
    peers = [GlobalOrder(size, rank=r, workers=2, batch_size=32, seed=3) for r in (0, 1)]
    for t in range(60):
        assert peers[0].batch(t) + peers[1].batch(t) == baseline.batch(t)


def test_every_epoch_is_one_permutation_and_any_global_batch_cuts_the_same_stream():
    size = 500
    order = stream(size, workers=2, batch_size=25, seed=0, steps=30)  # 1500 samples: three epochs
    epochs = [order[e * size:(e + 1) * size] for e in range(3)]
    assert all(sorted(e) == list(range(size)) for e in epochs)
    assert epochs[0] != epochs[1] != epochs[2]
    assert stream(size, workers=1, batch_size=50, seed=0, steps=30) == order  # the 1-process baseline
    assert stream(size, workers=3, batch_size=20, seed=0, steps=25) == order  # 3 peers of 20
    assert stream(size, workers=1, batch_size=25, seed=0, steps=60) == order  # the one-peer baseline


def test_the_order_is_the_seeds_and_the_loader_yields_it():
    assert stream(100, 2, 10, seed=1, steps=5) == stream(100, 2, 10, seed=1, steps=5)
    assert stream(100, 2, 10, seed=1, steps=5) != stream(100, 2, 10, seed=2, steps=5)
    data = TensorDataset(torch.arange(100))
    order = GlobalOrder(100, rank=1, workers=2, batch_size=10, seed=1)
    loaded = batches(data, order, num_workers=0)
    assert [next(loaded)[0].tolist() for _ in range(12)] == [order.batch(t) for t in range(12)]


def test_a_training_set_smaller_than_a_global_batch_is_refused():
    with pytest.raises(ConfigError, match="fewer than a global batch of 4 workers x 32"):
        GlobalOrder(100, rank=0, workers=4, batch_size=32, seed=0)


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


def test_ghost_batch_norm_normalises_each_peers_batch_as_that_peer_does():
    x = torch.randn(8, 3, 5, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    ghost = GhostBatchNorm2d(3, group=4).double()
    plain = torch.nn.BatchNorm2d(3).double()
    halves = torch.cat([plain(x[:4]), plain(x[4:])])
    assert torch.allclose(ghost(x), halves, atol=1e-12)
    assert not torch.allclose(ghost(x), torch.nn.BatchNorm2d(3).double()(x), atol=1e-3)  # one group of 8 differs
    assert torch.allclose(ghost(x[:4]), plain(x[:4]), atol=1e-12)  # a batch of one group: plain BatchNorm
    ghost.eval()
    assert torch.allclose(ghost(x), (x - ghost.running_mean[:, None, None])
                          / (ghost.running_var[:, None, None] + ghost.eps).sqrt(), atol=1e-12)


def config(**knobs):
    return OmegaConf.create({"model": {"name": "tiny"}, "batch_size": 32, "ghost_batch_norm": True,
                             "dtype": "float32"} | knobs)


def test_build_model_keeps_the_seeds_initial_weights_in_any_precision_and_batch_norm():
    torch.manual_seed(5)
    plain = build_model(config(ghost_batch_norm=False), 10, 1)
    torch.manual_seed(5)
    ghost64 = build_model(config(dtype="float64"), 10, 1)
    assert {type(m) for m in plain.modules()} & {GhostBatchNorm2d} == set()
    assert [m.group for m in ghost64.modules() if isinstance(m, GhostBatchNorm2d)] == [32, 32]
    assert {p.dtype for p in ghost64.parameters()} == {torch.float64}
    assert plain.state_dict().keys() == ghost64.state_dict().keys()
    for key, value in plain.state_dict().items():
        assert torch.equal(value.double() if value.is_floating_point() else value, ghost64.state_dict()[key]), key
