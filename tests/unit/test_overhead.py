"""bench/overhead.py's pairing and arithmetic, fed constructed step times (no run)."""
import math

import pytest

from bench.overhead import compare


def arms(raw_runs, framework_runs):
    """Callables that hand out these runs' step times in turn, recording the order they are asked for."""
    order, raw_left, framework_left = [], list(raw_runs), list(framework_runs)

    def raw():
        order.append("raw")
        return raw_left.pop(0)

    def framework():
        order.append("framework")
        return framework_left.pop(0)
    return order, raw, framework


def test_pairs_alternate_which_arm_goes_first_and_each_pair_is_its_own_two_runs():
    raw_runs = [[9, 9, 1.0, 1.0, 1.0], [9, 9, 2.0, 2.0, 2.0], [9, 9, 4.0, 4.0, 4.0]]
    framework_runs = [[9, 9, 1.25, 1.25, 1.25], [9, 9, 2.0, 2.0, 2.0], [9, 9, 5.0, 5.0, 5.0]]
    order, raw, framework = arms(raw_runs, framework_runs)
    result = compare(3, raw, framework, warmup=2)
    assert order == ["raw", "framework", "framework", "raw", "raw", "framework"]
    assert result["per_pair"] == pytest.approx([0.8, 1.0, 0.8])  # 1/1.25, 2/2, 4/5
    assert result["pairs"] == 3


def test_a_framework_five_percent_slower_in_every_pair_misses_the_goal():
    raw_runs = [[3.0, 3.0, 3.0, 1.0, 1.0]] * 4  # the warm-up steps, most of a run, left out
    framework_runs = [[0.1, 0.1, 0.1, 1.05, 1.05]] * 4
    result = compare(4, *arms(raw_runs, framework_runs)[1:], warmup=3)
    assert result["ratio"] == pytest.approx(0.952, abs=5e-4)
    assert result["goal_met"] is False
    assert result["interval_95"] is None  # the same ratio in every pair: no spread


def test_the_ratio_is_of_medians_and_its_interval_a_t_interval_over_pairs():
    # Medians after the warm-up: raw 1.0 both; framework exp(-0.1), exp(0.1) (the large step moves a mean, not a median)
    raw_runs = [[5.0, 1.0, 1.0, 1.0], [5.0, 1.0, 1.0, 1.0]]
    framework_runs = [[5.0, math.exp(-0.1), math.exp(-0.1), 4.0], [5.0, math.exp(0.1), math.exp(0.1), 0.1]]
    result = compare(2, *arms(raw_runs, framework_runs)[1:], warmup=1)
    assert result["per_pair"] == pytest.approx([math.exp(0.1), math.exp(-0.1)])
    assert result["ratio"] == pytest.approx(1.0)
    assert result["goal_met"] is True
    # log ratios ±0.1: sd 0.1414, se 0.1; t(0.975, 1 df) = 12.7062 -> exp(±1.27062)
    assert result["interval_95"] == pytest.approx((0.28068, 3.56278), rel=1e-4)
