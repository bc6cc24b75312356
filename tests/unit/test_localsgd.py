"""localsgd (integration tier: real runs of two peers on digits, model=tiny): synchronous DDP steps first, then
local steps with a model average every `every` steps and at the end; it learns, workers agree after the last
average, and each round moves the all-reduce's payload of the model, on the steps the schedule says."""
import pytest

from bench import collectives, projection
from bench.jobs import grid_settings
from helpers import compose_config

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("benchmark, option", [(collectives, "--collectives-grid"),
                                               (projection, "--projection-grid")])
def test_benchmark_runs_reach_a_periodic_average(benchmark, option):
    steps = int(grid_settings(benchmark.DEFAULT_GRID, option)["steps"])
    knobs = compose_config(*benchmark.STRATEGIES["localsgd"], f"max_steps={steps}").localsgd
    # the first average after warm-up comes at warmup_steps + every; the last step's forced one is no period
    assert knobs.warmup_steps + knobs.every < steps
