"""metrics/stats.py against cases computed by hand (df = 2, where Student's t has a closed form:
CDF(t) = 1/2 + t / (2 sqrt(2 + t^2)), quantile(p) = (2p - 1) / sqrt(2 p (1 - p)))."""
import math

import pytest

from metrics.stats import CANNOT_TELL, EQUIVALENT, FASTER, NO_INTERVAL, SLOWER, Ratio, decide, detectable, holm, \
    pooled_log_sd

pytestmark = pytest.mark.timeout(30)


def test_interval_is_a_t_interval_on_the_log_ratios():
    ratio = Ratio([1.1, 1.2, 1.3])
    # logs 0.0953102, 0.1823216, 0.2623643: mean 0.1799987, sd 0.0835513, se 0.0482384; t(0.975, 2) = 4.302653
    assert ratio.estimate == pytest.approx((1.1 * 1.2 * 1.3) ** (1 / 3))
    low, high = ratio.interval()
    assert (low, high) == (pytest.approx(math.exp(0.1799987 - 4.302653 * 0.0482384), rel=1e-5),
                           pytest.approx(math.exp(0.1799987 + 4.302653 * 0.0482384), rel=1e-5))
    assert low < 1 < high  # three blocks of +10..30 % still cannot exclude 1
    # t = 0.1799987 / 0.0482384 = 3.73144; two-sided p = 1 - 2 x 3.73144 / (2 sqrt(2 + 3.73144^2))
    assert ratio.p_value() == pytest.approx(1 - 3.73144 / math.sqrt(2 + 3.73144 ** 2), rel=1e-4)
    assert ratio.noise == pytest.approx(high / ratio.estimate - 1)


def test_one_block_has_no_interval():
    ratio = Ratio([1.25])
    assert ratio.estimate == pytest.approx(1.25)
    assert ratio.interval() is None and ratio.p_value() is None and ratio.noise is None
    assert decide(ratio, None, 0.05) == NO_INTERVAL


def test_holm_step_down():
    # sorted 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04 -> kept monotone at 0.06; None is no comparison
    assert holm([0.01, 0.04, None, 0.03]) == pytest.approx([0.03, 0.06, None, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_decisions():
    steady = Ratio([math.exp(-0.01), 1.0, math.exp(0.01)])  # mean log 0, sd 0.01, se 0.0057735
    # TOST at 5 %: the 90 % interval (t(0.95, 2) = 2.919986, half width 0.016859 in log) lies in +-ln(1.05)
    assert steady.equivalent(0.05) and not steady.equivalent(0.01)
    assert decide(steady, holm([steady.p_value()])[0], 0.05) == EQUIVALENT
    assert decide(steady, holm([steady.p_value()])[0], 0.01) == CANNOT_TELL
    faster = Ratio([1.50, 1.52, 1.48])
    slower = Ratio([0.70, 0.71, 0.69])
    assert faster.p_value() < 0.01 and slower.p_value() < 0.01
    assert decide(faster, faster.p_value(), 0.05) == FASTER and decide(slower, slower.p_value(), 0.05) == SLOWER
    # the same ratio is "cannot tell" when Holm's correction lifts its p-value over 0.05
    borderline = Ratio([1.1, 1.2, 1.3])
    assert decide(borderline, 0.04, 0.05) == FASTER and decide(borderline, 0.08, 0.05) == CANNOT_TELL


def test_smallest_detectable_difference():
    # (t(0.975, 2) + t(0.8, 2)) x sd / sqrt(3) = (4.302653 + 1.060660) x 0.1 / 1.7320508 = 0.309651 in log
    assert detectable(0.1, 3) == pytest.approx(math.exp(0.309651) - 1, rel=1e-5)
    assert detectable(0.1, 5) < detectable(0.1, 3) and detectable(0.1, 1) is None


def test_pooled_noise_weights_by_degrees_of_freedom():
    a, b = Ratio([1.0, math.exp(0.2)]), Ratio([1.0, math.exp(0.1), math.exp(0.2)])  # log sds 0.141421, 0.1
    assert pooled_log_sd([a, b, Ratio([2.0])]) == pytest.approx(math.sqrt((1 * 0.02 + 2 * 0.01) / 3))
    assert pooled_log_sd([Ratio([2.0])]) is None
