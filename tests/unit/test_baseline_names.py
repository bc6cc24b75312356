"""The baselines a multirun adds (unit tier): one directory each, trained with the runs' optimizer, and the commands
the report advises for runs it lacks, spelled as the user runs the tool."""
import re
import sys

import pytest

from helpers import report_config
from launchers.sweeper import baseline_names
from metrics.summary.schema import Summary

pytestmark = pytest.mark.timeout(30)


def test_baselines_of_one_shape_get_directories_of_their_own():
    """A sweep of an SGD and an AdamW strategy lacks two single runs of the same shape: one directory each."""
    missing = [{"strategy": "single", "peers": 2, "peer_cpus": 1, "model": "tiny"},
               {"strategy": "single", "peers": 1, "peer_cpus": 1, "model": "tiny"},
               {"strategy": "single", "peers": 2, "peer_cpus": 1, "optim": "adamw", "lr": 0.001, "model": "tiny"}]
    assert baseline_names(missing) == ["baseline_2x1", "baseline_1x1", "baseline_2x1_optim-adamw_lr-0.001"]
    assert baseline_names(missing[:2]) == ["baseline_2x1", "baseline_1x1"]
    from hydra.core.override_parser.overrides_parser import OverridesParser

    OverridesParser.create().parse_overrides([f"hydra.run.dir=/sweep/{n}" for n in baseline_names(missing)])


def run_of(strategy, optim, lr=0.01, peers=2, baseline=False):
    from metrics.report.runs import Run

    config = {"strategy": {"name": strategy}, "data": {"name": "digits"}, "model": {"name": "tiny"}, "peers": peers,
              "peer_cpus": 1, "batch_size": 32, "lr": lr, "optim": optim, "report": {"baseline_strategy": "single"}}
    return Run(f"/runs/{strategy}", Summary.from_dict({"config": config, "status": "completed", "is_baseline": baseline,
                                                       "throughput_samples_per_s": 100.0}), [])


def test_a_baseline_trains_with_the_runs_optimizer_and_the_missing_one_carries_it():
    from metrics.report.baselines import missing_baselines
    from metrics.report.runs import group_runs

    sgd = {"name": "sgd", "momentum": 0.9, "weight_decay": 0.0005}
    adamw = {"name": "adamw", "betas": [0.9, 0.999], "weight_decay": 0.01}
    runs = [run_of("allreduce", sgd), run_of("diloco", adamw, lr=0.001), run_of("single", sgd, baseline=True),
            run_of("single", sgd, peers=1, baseline=True)]
    wanted = missing_baselines(runs)
    # the SGD baselines are there; the AdamW ones are not, though single runs of those shapes exist
    assert [(o["peers"], o.get("optim"), o.get("lr")) for o in wanted] == [(2, "adamw", 0.001), (1, "adamw", 0.001)]
    assert len(group_runs(runs)) == 4


@pytest.mark.parametrize("typed_as, command", [("/home/me/.venv/bin/avgbench", "avgbench"),
                                               ("train.py", "python train.py")])
def test_the_report_advises_commands_spelled_as_the_tool_was_run(monkeypatch, tmp_path, typed_as, command):
    from metrics.report.baselines import override_command
    from metrics.report.noise import planning_noise
    from metrics.report.primary import declare

    monkeypatch.setattr(sys, "argv", [typed_as, "-m", "strategy=ring"])
    assert override_command({"strategy": "single", "peers": 2}) == f"{command} strategy=single peers=2"
    no_noise_recorded = tmp_path / "evidence.json"
    with pytest.raises(ValueError, match=re.escape(f"`{command} -m strategy=ring repeats=3 ")):
        planning_noise(no_noise_recorded, declare(report_config("ring", 2)), "digits", "tiny", ["ring"])
