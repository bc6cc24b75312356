"""A user's strategy (tests/userstrategies: toy.py and strategy/toy.yaml) found where users put one: a folder on
Hydra's search path, or an installed package's entry point of the group avgbench.strategies; its config names its
class and its cost model, and the checks before launch, the benchmarks and the projection find them there."""
from pathlib import Path

import pytest

from bench.jobs import averaging_strategies
from helpers import compose_config
from job.errors import ConfigError
from launchers.config import check_command, strategy_by_name, validate
from launchers.plugins import strategy_configs
from metrics.projection.models import cost_model

pytestmark = pytest.mark.timeout(60)

USER_STRATEGIES = Path(__file__).resolve().parent.parent / "userstrategies"
SEARCH_PATH = f"hydra.searchpath=[file://{USER_STRATEGIES}]"


@pytest.fixture(autouse=True)
def user_strategies_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(USER_STRATEGIES))


def installed(tmp_path, monkeypatch, entry_points: str) -> None:
    """A package installed with these entry points (its dist-info on sys.path)."""
    dist = tmp_path / "users_strategies-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: users-strategies\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[avgbench.strategies]\n{entry_points}\n")
    monkeypatch.syspath_prepend(str(tmp_path))


def test_a_folder_on_the_search_path_adds_a_strategy_with_its_knobs_and_cost_model():
    check_command([SEARCH_PATH, "strategy=toy", "toy.every=3"])
    cfg = compose_config(SEARCH_PATH, "strategy=toy")
    validate(cfg)
    assert (cfg.strategy.target, cfg.toy.every) == ("toy:Toy", 1)
    assert cost_model(cfg.strategy).__name__ == "ToyCost"
    assert strategy_configs([SEARCH_PATH])["toy"] == USER_STRATEGIES / "strategy" / "toy.yaml"
    with pytest.raises(ConfigError, match=r"unknown key toy.evry \(did you mean toy.every\?\)"):
        check_command([SEARCH_PATH, "strategy=toy", "toy.evry=3"])
    with pytest.raises(ConfigError, match="unknown strategy 'toy'"):
        check_command(["strategy=toy"])


def test_an_installed_packages_entry_point_adds_a_strategy(tmp_path, monkeypatch):
    installed(tmp_path, monkeypatch, "toy = toy")
    assert strategy_configs()["toy"] == USER_STRATEGIES / "strategy" / "toy.yaml"
    check_command(["strategy=toy", "toy.every=2"])
    cfg = compose_config("strategy=toy")
    validate(cfg)
    assert strategy_by_name("toy").__name__ == "Toy" and cost_model(cfg.strategy).__name__ == "ToyCost"
    assert averaging_strategies("collectives")["toy"] == ["strategy=toy", "toy.every=2"]  # its benchmark overrides


def test_an_entry_point_without_its_config_is_one_line_before_launch(tmp_path, monkeypatch):
    installed(tmp_path, monkeypatch, "gossip = json")
    with pytest.raises(ConfigError, match=r"avgbench.strategies entry point gossip = json: no strategy/gossip.yaml "
                                          "in the folder of module json"):
        check_command(["strategy=single"])


def test_a_strategy_whose_classes_cannot_be_imported_is_one_line_before_launch():
    with pytest.raises(ConfigError, match=r"strategy.target=toy:Nope: cannot import it \(AttributeError"):
        validate(compose_config(SEARCH_PATH, "strategy=toy", "strategy.target=toy:Nope"))
    with pytest.raises(ConfigError, match=r"strategy.cost_model=toy:Toy is no subclass of .*CostModel"):
        validate(compose_config(SEARCH_PATH, "strategy=toy", "strategy.cost_model=toy:Toy"))


def test_the_report_labels_a_users_strategy_by_its_name_not_its_knob_block():
    from bench.run_folders import report_config
    from metrics.report.runs import Run, group_runs, label_groups
    from metrics.summary.schema import Summary

    def run(strategy: str, **knobs) -> Run:
        config = report_config(strategy, peers=2) | ({strategy: knobs} if knobs else {})
        summary = Summary.from_dict({"status": "completed", "config": config, "strategy_knobs": knobs})
        return Run(Path(f"/runs/{strategy}"), summary, [])

    groups = group_runs([run("single"), run("toy", every=2)])
    label_groups(groups)
    assert [g.label for g in groups] == ["single", "toy"]
