"""Learning-rate scaling to the strategy's effective batch, and linear warm-up (unit tier)."""
import pytest
import torch
from omegaconf import OmegaConf

from job.optim import build_optimizer, scaled_lr

pytestmark = pytest.mark.timeout(30)


def config(scaling: str, warmup: int = 0):
    return OmegaConf.create({"lr": 0.1, "batch_size": 32, "lr_scaling": scaling, "warmup_steps": warmup,
                             "optim": {"name": "sgd", "momentum": 0.0, "weight_decay": 0.0}})


@pytest.mark.parametrize("scaling, expected", [("none", 0.1), ("linear", 0.4), ("sqrt", 0.2)])
def test_scaled_lr_for_four_times_the_batch(scaling, expected):
    assert scaled_lr(config(scaling), effective_batch=128) == pytest.approx(expected)


def test_warmup_ramps_linearly_from_lr_to_the_scaled_rate_then_holds():
    param = torch.nn.Parameter(torch.zeros(3))
    optimizer = build_optimizer([param], config("linear", warmup=4), effective_batch=128)
    rates = []
    for _ in range(6):
        rates.append(optimizer.param_groups[0]["lr"])
        param.grad = torch.ones(3)
        optimizer.step()
    assert rates == pytest.approx([0.1, 0.175, 0.25, 0.325, 0.4, 0.4])


def test_effective_batch_follows_how_each_strategy_updates():
    from helpers import compose_config
    from launchers.config import strategy_class

    def effective(*overrides):
        cfg = compose_config(*overrides)
        return strategy_class(cfg).launch_spec(cfg).effective_batch

    assert effective("strategy=allreduce", "peers=4") == 128
    assert effective("strategy=single", "peers=4") == 128
    assert effective("strategy=ps", "peers=4", "ps.mode=async") == 32
    assert effective("strategy=ring", "peers=4", "ring.backward_passes_per_step=2") == 256
    assert effective("strategy=hivemind", "peers=4", "hivemind.target_batch_size=512") == 512
    assert effective("strategy=hivemind", "peers=4", "hivemind.use_local_updates=true") == 32
    assert effective("strategy=stepwise", "peers=4") == 32
