"""bench/verdict_simulation.py: simulated sweeps through the real report code (unit tier: run folders in a temporary
folder, no process). The harness pairs each comparison with its true ratio, censors and crashes runs as told, fits
its noise to the recorded runs, and a smoke run of few draws checks a property that holds at any draw count."""
import math

import pytest

from bench import verdict_simulation as simulation
from bench.jobs import choices
from metrics.recording.machine import fingerprint
from metrics.report.stats import FASTER, SLOWER

pytestmark = pytest.mark.timeout(60)

QUIET = {"run_log_sd": 0.001, "horizon_z": 10.0, "crash_rate": 0.0}  # nearly noiseless, no miss, no crash


def judged_sweep(tmp_path, speeds: dict, blocks: int, fit: dict, seed: int = 0) -> dict:
    rng = simulation.np.random.default_rng(seed)
    folder = tmp_path / "sweep"
    simulation.write_sweep(folder, simulation.sweep_jobs(rng, speeds, blocks, "log-normal", fit))
    return simulation.judged(folder, speeds)


def test_each_comparison_is_paired_with_the_ratio_its_configurations_were_given(tmp_path):
    """Ring 2x faster and ps 1.25x slower than the baseline, stepwise as fast, nearly without noise: every declared
    comparison's estimate is the ratio of the speeds the sweep was written with (> 1: `this` is the faster)."""
    speeds = {"ps": 0.8, "ring": 2.0, "stepwise": 1.0}
    found = judged_sweep(tmp_path, speeds, 3, QUIET)
    # declared order: each configuration against the baseline, then ps-ring, ps-stepwise, ring-stepwise
    assert [round(c["true"], 6) for c in found["comparisons"]] == [0.8, 2.0, 1.0, 0.4, 0.8, 2.0]
    for c in found["comparisons"]:
        assert c["estimate"] == pytest.approx(c["true"], rel=0.01)
        assert c["blocks"] == 3 and c["censored"] == 0
    assert [c["decision"] for c in found["comparisons"]] == [SLOWER, FASTER, "equivalent", SLOWER, SLOWER, FASTER]


def test_a_run_past_its_horizon_misses_and_a_crashed_run_fails(tmp_path):
    """Horizon below the median (z = -10 log sds): every run misses the target, so every block of the six
    comparisons is censored and nothing is claimed. Crash rate 1: every run failed, the same, and the baseline,
    with no completed run, is no baseline (the report's rule): the three comparisons between configurations remain."""
    speeds = {"ps": 1.0, "ring": 2.0, "stepwise": 1.0}
    for fit, comparisons in ((QUIET | {"horizon_z": -10.0}, 6), (QUIET | {"crash_rate": 1.0}, 3)):
        found = judged_sweep(tmp_path / str(comparisons), speeds, 3, fit)
        assert [c["censored"] for c in found["comparisons"]] == [3] * comparisons
        assert not any(c["decision"] in (FASTER, SLOWER) for c in found["comparisons"])


def test_false_claims_count_any_claim_on_a_null_and_a_claim_against_the_true_direction():
    null, faster_truth = {"true": 1.0}, {"true": 2.0}
    assert simulation.wrong(null, FASTER) and simulation.wrong(null, SLOWER)
    assert simulation.wrong(faster_truth, SLOWER) and not simulation.wrong(faster_truth, FASTER)
    assert not simulation.wrong(null, "cannot tell") and not simulation.wrong(null, "equivalent")
    assert simulation.contradicts({"decision": FASTER, "estimate": 0.9})
    assert simulation.contradicts({"decision": SLOWER, "estimate": 1.1})
    assert not simulation.contradicts({"decision": FASTER, "estimate": 1.1})


def test_clopper_pearson_upper_bound():
    """No event in n draws: the one-sided 95 % bound solves (1 - p)^n = 0.05; all events: 1."""
    assert simulation.upper_bound(0, 59) == pytest.approx(1 - 0.05 ** (1 / 59), rel=1e-9)
    assert simulation.upper_bound(59, 59) == 1.0


def test_the_noise_is_fitted_to_the_recorded_runs():
    """primary_noise rows pooled by df (blocks - 1), / sqrt(2); Jeffreys rates of misses and crashes; other
    strategies' rows left out, and so are rows of another estimator or another machine than the headline's."""
    here, elsewhere = fingerprint(), {**fingerprint(), "cpu_model": "another"}
    row = {"figure": "time_to_target", "censored": 0, "estimator": "causal_isotonic", "machine": here,
           "measured_at": "then"}
    results = {"primary_noise": {"rows": [row | {"strategy": "ps", "log_sd": 0.2, "blocks": 3},
                                          row | {"strategy": "ring", "log_sd": 0.1, "blocks": 5, "censored": 1},
                                          row | {"strategy": "diloco", "log_sd": 9.0, "blocks": 9},
                                          row | {"strategy": "ps", "log_sd": 9.0, "blocks": 9, "estimator": "isotonic"},
                                          row | {"strategy": "ring", "log_sd": 9.0, "blocks": 9, "machine": elsewhere}]},
               "headline": {"answers": [{"runs": 18, "machine": here,
                                         "comparisons": [{"censored": 1, "against_baseline": True},
                                                         {"censored": 2, "against_baseline": False}]}]}}
    fit = simulation.fitted(results, "causal_isotonic")
    assert fit["paired_log_sd"] == pytest.approx(math.sqrt((2 * 0.04 + 4 * 0.01) / 6))
    assert fit["run_log_sd"] == pytest.approx(fit["paired_log_sd"] / math.sqrt(2))
    assert fit["miss_rate"] == pytest.approx(1.5 / (2 * 3 + 2 * 6 + 1))
    assert fit["crash_rate"] == pytest.approx(1.5 / 19)


def test_every_scenario_can_be_chosen_by_name():
    """--verdict_simulation-scenarios takes names separated by commas: a name holding one could not be chosen."""
    names = list(simulation.SCENARIOS)
    assert choices(",".join(names), simulation.SCENARIOS, str, "--verdict_simulation-scenarios") == names


def test_bad_choices_fail_before_any_draw():
    with pytest.raises(SystemExit, match="unknown 4"):
        simulation.run(draws=1, blocks="4")
    with pytest.raises(SystemExit, match="draws must be at least 1"):
        simulation.run(draws=0)


@pytest.fixture(scope="module")
def smoke():
    """A few draws of every scenario at the headline's 3 blocks and at 6, both noises: the entry as saved."""
    return simulation.run(draws=3, blocks="3,6")


@pytest.mark.timeout(300)  # the smoke run: about 20 s of CPU, longer on a busy machine
def test_the_smoke_run_records_every_cell(smoke):
    assert len(smoke["cells"]) == len(simulation.SCENARIOS) * 2 * len(simulation.NOISES)
    for cell in smoke["cells"]:
        assert cell["draws"] == 3
        assert 0 <= cell["false_claim_rate"] <= cell["false_claim_upper"] <= 1
        assert cell["blocks_used"] <= cell["blocks"]
    effects = [c for c in smoke["cells"] if c["scenario"] == "effect x2"]
    assert all(set(c["power"]) == {"x2", "x4"} for c in effects)  # true ratios E and 1/E, and E^2
    assert smoke["draws_per_cpu_s"] > 0 and all(c["cpu_s"] > 0 for c in smoke["cells"])


@pytest.mark.timeout(300)
def test_no_claim_contradicts_its_printed_ratio(smoke):
    contradicting = [(c["scenario"], c["blocks"], c["noise"], c["contradictions"]) for c in smoke["cells"]
                     if c["contradictions"]]
    assert not contradicting


def test_the_goal_is_missed_by_any_cell_over_a_false_claim_bound_with_a_contradiction_or_low_coverage():
    """Issue 50's bar, cell by cell: a 95 % upper bound of false claims at most 6 %, no contradiction, coverage at
    least 93 % (a cell without intervals is judged on the other two)."""
    good = {"scenario": "global null", "blocks": 3, "noise": "log-normal", "false_claim_upper": 0.06,
            "contradictions": 0, "coverage": 0.93}
    assert simulation.missed_goals([good, good | {"coverage": None}]) == []
    missed = simulation.missed_goals([good | {"false_claim_upper": 0.061}, good | {"contradictions": 1},
                                      good | {"coverage": 0.929, "blocks": 10}])
    assert missed == ["global null, 3 blocks, log-normal: false claims up to 6.1%",
                      "global null, 3 blocks, log-normal: 1 contradictions",
                      "global null, 10 blocks, log-normal: coverage 92.9%"]
