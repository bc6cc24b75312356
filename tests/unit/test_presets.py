"""Experiment presets compose and scale with one knob (unit tier); a scaled-down sweep of each ends in a
report, and the Slurm launcher preset composes through train.py (integration tier)."""

import pytest
from omegaconf import OmegaConf

from helpers import compose_config

pytestmark = pytest.mark.timeout(60)


def test_baseline_grid_scales_steps_with_batch():
    for batch, steps in ((32, 100), (64, 50), (128, 25)):
        cfg = compose_config("experiment=thesis_baseline", f"batch_size={batch}")
        assert cfg.max_steps == steps and cfg.strategy.name == "single"
    assert compose_config("experiment=thesis_baseline", "scale=1").max_steps == 10000


def test_hivemind_preset_keeps_total_cpus_and_never_scales_the_target_batch():
    for peers, cpus in ((2, 8), (4, 4), (8, 2), (16, 1)):
        cfg = compose_config("experiment=thesis_hivemind", f"peers={peers}")
        assert cfg.peer_cpus == cpus and cfg.peers * cfg.peer_cpus == cfg.total_cpus
    cfg = compose_config("experiment=thesis_hivemind", "target_batch_base=625")
    assert (cfg.hivemind.target_batch_size, cfg.max_steps) == (625, 100)  # scale=0.01 shortens the run only
    assert compose_config("experiment=thesis_hivemind", "scale=0.5").hivemind.target_batch_size == 10000
    sweep = OmegaConf.to_container(compose_config("experiment=thesis_hivemind", return_hydra_config=True)
                                   .hydra.sweeper.params)
    assert sweep["peers"] == "2,4,8,16" and sweep["target_batch_base"] == "10000,5000,2500,1250,625"
