"""The end of a multirun (unit tier): where the baselines it lacks are run."""
import pytest

from launchers.sweep import baseline_names

pytestmark = pytest.mark.timeout(30)


def test_baselines_of_one_shape_get_directories_of_their_own():
    """A sweep of an SGD and an AdamW strategy lacks two single runs of the same shape: one directory each."""
    missing = [{"strategy": "single", "peers": 2, "peer_cpus": 1, "model": "tiny"},
               {"strategy": "single", "peers": 1, "peer_cpus": 1, "model": "tiny"},
               {"strategy": "single", "peers": 2, "peer_cpus": 1, "optim": "adamw", "lr": 0.001, "model": "tiny"}]
    assert baseline_names(missing) == ["baseline_2x1", "baseline_1x1", "baseline_2x1_optim=adamw_lr=0.001"]
    assert baseline_names(missing[:2]) == ["baseline_2x1", "baseline_1x1"]
