"""The published cases of bench/field.py: a well-formed table, predictions equal to the command line's own output
for the same arguments, and the goal arithmetic. No process is launched (hand-written run directories)."""
import json

import pytest

from bench.field import CASES, SOURCES, Case, cli_arguments, judged, predicted_row, rankings, summarize
from helpers import strategy_names, validation_case, write_results, write_run
from metrics.projection.evidence import load_evidence
from metrics.projection.project import main

pytestmark = pytest.mark.timeout(60)


def test_the_case_table_is_well_formed():
    assert len({c.source for c in CASES}) >= 2 and len(CASES) >= 3
    for case in CASES:
        assert case.source in SOURCES and case.strategy in strategy_names()
        assert case.peers >= 16 and case.peers % case.gpus_per_node == 0
        assert min(case.link_mbit, case.batch, case.compute_s, case.parameters, case.published) > 0
        assert case.where and case.compute_from and case.parameters_from
        assert case.published < (100 if case.figure == "efficiency" else case.compute_s * 10)
        if case.figure == "step_s":  # a published step at N is never shorter than one device's step
            assert case.published >= case.compute_s
    for source in SOURCES.values():
        assert source["figure"] in ("step_s", "efficiency") and source["citation"] and source["hardware"]


def structural_runs(tmp_path) -> dict:
    """An allreduce (DDP) and a ring run of 2 workers on 20 Mbit/s, P = 1 MB per round; the ring run measured
    0.01 s of communication behind backward per step."""
    write_run(tmp_path / "allreduce", "strategies.allreduce:AllReduce", {"transport": "gloo", "ddp": True},
              workers=2, payload=1_000_000, mbit=20, train_s=[1.0, 1.7, 2.4, 3.1])
    write_run(tmp_path / "ring", "strategies.ring:Ring", {"backward_passes_per_step": 1}, workers=2,
              payload=1_000_000, mbit=20, train_s=[1.0, 1.7, 2.4, 3.1], step={"hidden_comm_s": 0.01})
    return {"allreduce": tmp_path / "allreduce", "ring": tmp_path / "ring"}


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.model}-{c.peers}")
def test_each_prediction_is_the_command_lines_own(tmp_path, case):
    runs = structural_runs(tmp_path)
    evidence_file = write_results(tmp_path / "results.json", [validation_case(case.strategy, 4, 0.05),
                                                              validation_case(case.strategy, 8, -0.05)], 0.9)
    row = predicted_row(case, runs[case.strategy], load_evidence(evidence_file))
    out = tmp_path / "out"
    assert main([str(runs[case.strategy]), *cli_arguments(case), "--evidence", str(evidence_file), "-o", str(out)]) == 0
    cli = json.loads((out / "projection.json").read_text())["runs"][0]
    assert cli["measured"]["compute_of"].startswith("declared by you")
    assert [r["step_s"] for r in cli["projections"][0]["rows"]] == [pytest.approx(row["step_s"], rel=1e-12)]
    assert cli["projections"][0]["link"]["mbit"] == case.link_mbit


def test_a_prediction_by_hand():
    """resnet50 at N=16 on 400 Gbit/s, payload share 0.9, no hidden communication (the allreduce run logs none):
    0.097 + 2 x 15/16 x 102.228128 MB / (50 GB/s x 0.9) = 0.097 + 0.0042595 s."""
    case = next(c for c in CASES if c.model == "resnet50")
    assert case.gradient_mb == pytest.approx(102.228128)
    expected = 0.097 + 2 * 15 / 16 * 102.228128e6 / (400e9 / 8 * 0.9)
    assert judged(case, expected)["error"] == pytest.approx(expected / 0.104 - 1)


def test_prediction_by_hand_through_the_projection(tmp_path):
    case = next(c for c in CASES if c.model == "resnet50")
    evidence_file = write_results(tmp_path / "results.json", [validation_case("allreduce", 4, 0.05)], 0.9)
    row = predicted_row(case, structural_runs(tmp_path)["allreduce"], load_evidence(evidence_file))
    assert row["step_s"] == pytest.approx(0.097 + 2 * 15 / 16 * 102.228128e6 / (400e9 / 8 * 0.9))
    assert row["unvalidated"]  # N = 16 > the validated N = 4, 400 Gbit/s outside the 20 Mbit/s validated there


def efficiency_case(published: float, model: str = "m") -> Case:
    return Case("horovod_benchmarks", "here", model, "ring", 128, 4, 25_000, 64, 0.5, "x", 1e6, "y", published)


def test_goals_in_points_of_efficiency_and_in_step_time():
    assert judged(efficiency_case(90.0), 0.5 / 0.8) == {"predicted": pytest.approx(80.0), "error": pytest.approx(-10.0),
                                                        "within_goal": True}
    assert not judged(efficiency_case(90.0), 0.5 / 0.79)["within_goal"]  # 79 %: 11 points below
    step = Case("pytorch_ddp_benchmark", "here", "m", "allreduce", 16, 8, 1, 32, 0.1, "x", 1e6, "y", 0.2)
    assert judged(step, 0.23)["within_goal"] and not judged(step, 0.231)["within_goal"]
    assert judged(step, None) == {"predicted": None, "error": None, "within_goal": False}


def test_rankings_count_pairs_of_one_source_with_different_published_figures():
    rows = [{"source": "a", "label": "x", "published": 90, "predicted": 80},
            {"source": "a", "label": "y", "published": 90, "predicted": 70},   # a tie in the source: no ranking
            {"source": "a", "label": "z", "published": 68, "predicted": 75},   # kept against x, not against y
            {"source": "b", "label": "w", "published": 10, "predicted": 1}]    # another source: never paired
    pairs = rankings(rows)
    assert [(p["pair"], p["preserved"]) for p in pairs] == [(["x", "z"], True), (["y", "z"], False)]


def test_the_goal_needs_the_share_and_every_ranking():
    rows = [{"source": "pytorch_ddp_benchmark", "label": str(i), "published": i, "predicted": i,
             "within_goal": i < 4} for i in range(5)]
    assert summarize(rows)["share_within_goal"] == 0.8 and summarize(rows)["goal_met"]
    rows[0]["predicted"] = 9  # its order against every other case flips
    assert not summarize(rows)["goal_met"] and not summarize(rows)["every_ranking_preserved"]
