"""allreduce.comm_hook: torch's DDP communication hooks, with the bytes they hand to the all-reduce counted (unit
tier: the knobs' checks, and the expected bytes against the tiny CNN's shapes). Expected bytes are derived from the
tiny CNN's layer shapes counted by hand (tests/helpers.py: TINY_SHAPES, powersgd_floats), not from the strategy's
code."""
import pytest

from helpers import TINY_DIGITS_PARAMS, TINY_SHAPES, compose_config, powersgd_floats
from job.errors import ConfigError
from launchers.config import validate

pytestmark = pytest.mark.timeout(60)


def test_the_shapes_are_the_tiny_models():
    assert sum(powersgd_floats([s], rank=10**6) for s in TINY_SHAPES) == TINY_DIGITS_PARAMS  # nothing compressed


@pytest.mark.parametrize("overrides, message", [
    (["allreduce.comm_hook=zip"], "allreduce.comm_hook must be one of none, fp16, bf16, powersgd"),
    (["allreduce.comm_hook=fp16", "allreduce.ddp=false"], "needs transport=gloo and allreduce.ddp=true"),
    (["allreduce.comm_hook=powersgd", "transport=mpi"], "needs transport=gloo and allreduce.ddp=true"),
    (["allreduce.powersgd_rank=0"], "allreduce.powersgd_rank must be >= 1"),
    (["allreduce.powersgd_start_iter=1"], "allreduce.powersgd_start_iter must be >= 2"),
])
def test_bad_hook_settings_are_refused_before_launch(overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate(compose_config("strategy=allreduce", "peers=2", *overrides))
