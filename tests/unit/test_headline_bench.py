"""bench/headline.py's replication rule: two sweeps replicate when they rank alike, no claim of one contradicts the
other's, and at least two pairs of averaging configurations are separated in both. And the wall-time ratio's
denominator, the headline on loopback, measured from a complete loopback sweep."""
from datetime import date

import pytest

from bench.headline import recorded_answer, replication, unfinished_folders
from bench.results import BenchResult, save
from metrics.recording.machine import fingerprint


def sweep(ranking, claims, withheld=False):
    return {"ranking": ranking, "claims_withheld": withheld,
            "comparisons": [{"this": a, "other": b, "claim": claim, "against_baseline": b.startswith("single")}
                            for (a, b), claim in claims.items()]}


RANKING = ["stepwise", "ring", "single (2x1)", "ps"]
AGREEING = {("ps", "ring"): "slower", ("ps", "stepwise"): "slower", ("ring", "stepwise"): "cannot tell",
            ("ring", "single (2x1)"): "cannot tell"}


def test_two_alike_sweeps_replicate():
    found = replication(sweep(RANKING, AGREEING), sweep(RANKING, AGREEING))
    assert found == {"same_ranking": True, "contradictions": [],
                     "separated_averaging_pairs": ["ps vs ring: slower", "ps vs stepwise: slower"],
                     "claims_withheld": False, "replicates": True}


def test_a_sweep_whose_control_arm_failed_replicates_nothing():
    """Its verdict withheld every claim (the same run twice in a block differed): no separation counts."""
    found = replication(sweep(RANKING, AGREEING, withheld=True), sweep(RANKING, AGREEING))
    assert found["claims_withheld"] and not found["replicates"]


def test_a_faster_against_a_slower_is_a_contradiction():
    flipped = AGREEING | {("ring", "stepwise"): "faster"}
    second = sweep(RANKING, AGREEING | {("ring", "stepwise"): "slower"})
    found = replication(sweep(RANKING, flipped), second)
    assert found["contradictions"] == ["ring vs stepwise: faster / slower"] and not found["replicates"]


def test_separation_against_the_baseline_does_not_count_and_one_pair_is_not_enough():
    claims = AGREEING | {("ps", "stepwise"): "cannot tell", ("ring", "single (2x1)"): "faster"}
    found = replication(sweep(RANKING, claims), sweep(RANKING, claims))
    assert found["separated_averaging_pairs"] == ["ps vs ring: slower"] and not found["replicates"]


def test_another_ranking_does_not_replicate():
    found = replication(sweep(RANKING, AGREEING), sweep(list(reversed(RANKING)), AGREEING))
    assert not found["same_ranking"] and not found["replicates"]


def saved(tmp_path, answers, machine, setup="the setup"):
    results = tmp_path / "results"
    save(BenchResult.of({"name": "headline", "goal": "replicates", "setup": setup, "answers": answers, "sweeps": [],
                         "measured_at": "2026-11-26 12:00:00", "machine": machine}), results)
    return results


def test_one_new_sweep_is_checked_against_the_latest_recorded_on_this_machine(tmp_path):
    """Its folder may be gone (another session): the recorded answer stands in for it, dated."""
    here = fingerprint()
    elsewhere = here | {"cpu_model": "1" + str(here["cpu_model"])}
    answers = [{"folder": "multirun/a", "measured_at": "2026-11-26 04:02:13", "machine": here},
               {"folder": "multirun/b", "measured_at": "2026-11-26 10:35:00", "machine": here},
               {"folder": "multirun/c", "measured_at": "2026-11-26 12:00:00", "machine": elsewhere}]
    results = saved(tmp_path, answers, here)
    assert recorded_answer(results, "the setup", "multirun/new")["folder"] == "multirun/b"
    assert recorded_answer(results, "the setup", "multirun/b")["folder"] == "multirun/a"
    assert recorded_answer(results, "the setup", "multirun/b")["measured_at"] == "2026-11-26 04:02:13"
    assert recorded_answer(results, "another setup", "multirun/new") is None
    assert recorded_answer(saved(tmp_path, answers[2:], here), "the setup", "multirun/new") is None


def loopback_sweep(tmp_path, link="loopback", planned=3):
    from helpers import write_sweep

    def job(strategy, peers, wall_s, started_at):
        return [(strategy, peers, 1, 100.0, 10.0, {"summary": {
            "wall_s": wall_s, "started_at": started_at, "link": {"kind": "none" if strategy == "single" else link}}})]

    jobs = {"strategy=ring": job("allreduce", 2, 100.0, 1000.0), "strategy=ps": job("ps", 2, 200.0, 1200.0),
            "baseline_2x1": job("single", 2, 50.0, 1500.0)}
    return write_sweep(tmp_path / "lo", jobs, {"jobs": [["a planned run"]] * planned})


def test_the_measured_loopback_headline_is_the_sum_of_its_runs_wall_clocks_and_only_a_complete_loopback_sweep(
        tmp_path):
    from bench.headline import measured_loopback

    assert measured_loopback(loopback_sweep(tmp_path))["wall_s"] == 350.0  # 100 + 200 + 50 s, the pauses left out
    with pytest.raises(RuntimeError, match="3 of its 6 planned runs completed; resume it first"):
        measured_loopback(loopback_sweep(tmp_path / "half", planned=6))
    with pytest.raises(RuntimeError, match="not the headline on loopback .*emulated"):
        measured_loopback(loopback_sweep(tmp_path / "linked", link="emulated"))


def test_sweeps_go_into_the_first_folders_of_the_day_without_a_report(tmp_path):
    """A finished sweep (its report written) is kept; one stopped half-way is resumed; then new folders."""
    day = date(2026, 11, 29)
    finished, stopped = tmp_path / "headline-2026-11-29-1", tmp_path / "headline-2026-11-29-2"
    for folder in (finished, stopped):
        folder.mkdir()
    (finished / "report.md").write_text("a report")
    assert unfinished_folders(tmp_path, day, 2) == [stopped, tmp_path / "headline-2026-11-29-3"]
    assert unfinished_folders(tmp_path, date(2026, 11, 30), 1) == [tmp_path / "headline-2026-11-30-1"]


def test_the_headline_meets_its_design_goal_only_faster_than_six_tenths_and_deciding_what_the_fixed_design_decides():
    from bench.headline import against_fixed_design

    fixed = sweep(RANKING, AGREEING | {("ring", "single (2x1)"): "equivalent"}) | {"wall_s": 3000.0,
                                                                                 "runs_from_to": [0.0, 3000.0]}
    alike = sweep(RANKING, AGREEING | {("ring", "single (2x1)"): "equivalent", ("ring", "stepwise"): "faster"})
    after = {"folder": "h", "wall_s": 1500.0, "runs_from_to": [3060.0, 4560.0]}  # a minute after the fixed design
    found = against_fixed_design(alike | after, fixed)
    assert (found["ratio"], found["decided"], found["decided_otherwise"], found["goal_met"]) == (0.5, 3, [], True)
    assert found["one_after_the_other"] and found["apart_s"] == 60
    assert not against_fixed_design(alike | after | {"wall_s": 1801.0}, fixed)["goal_met"]  # 0.60x: over the goal
    next_day = against_fixed_design(alike | after | {"runs_from_to": [90_000.0, 91_500.0]}, fixed)
    assert not next_day["one_after_the_other"] and not next_day["goal_met"]
    before = against_fixed_design(alike | after | {"runs_from_to": [-1600.0, -100.0]}, fixed)
    assert before["apart_s"] == 100 and before["goal_met"]  # the fixed design right after it counts alike
    undecided = sweep(RANKING, AGREEING | {("ps", "stepwise"): "cannot tell"}) | after
    found = against_fixed_design(undecided, fixed)
    assert found["decided_otherwise"] == ["ps vs stepwise: slower / cannot tell",
                                          "ring vs single (2x1): equivalent / cannot tell"]
    assert not found["goal_met"]


def test_every_pair_of_sweeps_must_meet_the_design_goal_and_the_blocks_pool_over_pairs():
    """Two pairs measured one after the other: each headline sweep against the fixed sweep beside it, in order; the
    goal is every pair's; the blocks' ratios (block wall clocks, headline / fixed) pool over both pairs."""
    from bench.headline import against_fixed_designs

    def timed(walls, start):
        return {"folder": f"at{start}", "wall_s": sum(walls), "runs_from_to": [start, start + sum(walls)],
                "block_wall_s": {str(b): w for b, w in enumerate(walls)}}

    fixed = [sweep(RANKING, AGREEING) | timed([200.0, 400.0], 0.0), sweep(RANKING, AGREEING) | timed([100.0, 100.0],
                                                                                                   5000.0)]
    heads = [sweep(RANKING, AGREEING) | timed([100.0, 200.0], 700.0),  # 0.5 in both blocks
             sweep(RANKING, AGREEING) | timed([50.0, 80.0], 4800.0)]  # 0.5 and 0.8: the pair at 0.65
    found = against_fixed_designs(heads, fixed)
    assert [p["headline_folder"] for p in found["pairs"]] == ["at700.0", "at4800.0"]
    assert [p["block_ratios"] for p in found["pairs"]] == [{"0": 0.5, "1": 0.5}, {"0": 0.5, "1": 0.8}]
    assert found["blocks"] == 4 and found["block_ratio"] == pytest.approx(0.1 ** 0.25)  # (0.5^3 x 0.8)^(1/4)
    assert found["block_interval_95"] == pytest.approx([0.3869, 0.8173], abs=1e-4)  # t on 3 df of the log ratios
    assert [p["goal_met"] for p in found["pairs"]] == [True, False] and not found["goal_met"]
    assert against_fixed_designs(heads[:1], fixed[:1])["goal_met"]
    only_last = against_fixed_designs(heads, fixed[1:])  # one fixed sweep: beside the last headline sweep
    assert [p["headline_folder"] for p in only_last["pairs"]] == ["at4800.0"]


def test_the_entry_meets_its_goals_only_where_every_measured_goal_is_met():
    """The benchmarks table's one word: the wall time against loopback, replication and the fixed design's goal,
    each counted where measured; none measured: no word."""
    from bench.headline import goal_met

    replicates, differs, met, missed = {"replicates": True}, {"replicates": False}, {"goal_met": True}, {
        "goal_met": False}
    assert goal_met(None, None, None) is None
    assert goal_met(None, met, None) is True
    assert goal_met(None, missed, None) is False
    assert goal_met(None, missed, replicates) is False
    assert goal_met(1.4, met, replicates) is True
    assert goal_met(1.6, met, replicates) is False  # the wall time over 1.5x loopback's
    assert goal_met(1.4, met, differs) is False
