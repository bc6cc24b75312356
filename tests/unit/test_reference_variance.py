"""bench/reference_variance.py: the share of the paired log ratios' variance the speed reference explains, after
each comparison's own effect is removed."""
import math
import random
import statistics

import pytest

from bench.reference_variance import explained, r2_interval


def rows(ys, xs, comparison="a / b", sweep="s", control=False):
    return [{"comparison": comparison, "sweep": sweep, "block": i, "y": y, "x": x, "control": control}
            for i, (y, x) in enumerate(zip(ys, xs))]


def test_a_figure_that_moves_with_the_reference_is_explained_whatever_each_comparisons_own_effect():
    rng = random.Random(1)
    found = []
    for comparison, effect in (("ring / single", 0.5), ("ps / single", -0.3), ("single / control", 0.0)):
        xs = [rng.gauss(0, 0.1) for _ in range(6)]
        found += rows([x + effect for x in xs], xs, comparison)
    figures = explained(found)
    assert figures["r2"] == pytest.approx(1) and figures["slope"] == pytest.approx(1)
    assert figures["adjusted_share"] == pytest.approx(1) and figures["log_sd_after"] == pytest.approx(0, abs=1e-12)


def test_a_reference_that_carries_no_information_explains_nothing_and_its_adjustment_adds_its_noise():
    rng = random.Random(2)
    found = rows([rng.gauss(0, 0.1) for _ in range(4000)], [rng.gauss(0, 0.1) for _ in range(4000)])
    figures = explained(found)
    assert figures["r2"] < 0.01
    assert figures["adjusted_share"] == pytest.approx(-1, abs=0.1)  # var(y - x) = var(y) + var(x) = 2 var(y)


def test_half_the_reference_plus_noise_gives_the_share_its_variances_set():
    rng = random.Random(3)
    xs = [rng.gauss(0, 0.2) for _ in range(4000)]
    found = rows([x / 2 + rng.gauss(0, 0.1) for x in xs], xs)
    figures = explained(found)
    assert figures["slope"] == pytest.approx(0.5, abs=0.03)
    assert figures["r2"] == pytest.approx(0.01 / (0.01 + 0.01), abs=0.03)  # (0.5 x 0.2)² against 0.1²


def test_the_sd_is_pooled_over_comparisons_each_less_its_own_mean():
    found = rows([3, 1], [0, 0], "a / b") + rows([2, -2], [0, 0], "c / d")
    sd = math.sqrt((statistics.variance([3, 1]) + statistics.variance([2, -2])) / 2)
    assert explained(found)["log_sd_before"] == pytest.approx(sd)


def test_the_interval_holds_the_share_and_is_a_point_when_every_resample_agrees():
    rng = random.Random(4)
    xs = [rng.gauss(0, 0.1) for _ in range(8)]
    assert r2_interval(rows(xs, xs)) == pytest.approx([1, 1])
    noisy = rows([x + rng.gauss(0, 0.1) for x in xs], xs)
    low, high = r2_interval(noisy)
    assert low <= explained(noisy)["r2"] <= high and high - low > 0.05
