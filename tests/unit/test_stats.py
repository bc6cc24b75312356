"""metrics/report/stats.py against cases computed by hand (df = 2, where Student's t has a closed form:
CDF(t) = 1/2 + t / (2 sqrt(2 + t^2)), quantile(p) = (2p - 1) / sqrt(2 p (1 - p)))."""
import math

import pytest

from metrics.report.stats import (CANNOT_TELL, EQUIVALENT, FASTER, NO_INTERVAL, SLOWER, Bound, CensoredRatio, Ratio,
                           blocks_for, decide, detectable, holm, olympic_mean, pooled_log_sd, rank_test_blocks,
                           signed_rank_p)

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
    assert math.sqrt(high / low) == pytest.approx(high / ratio.estimate)  # the x/÷ factor: symmetric on the log scale


def test_one_block_has_no_interval():
    ratio = Ratio([1.25])
    assert ratio.estimate == pytest.approx(1.25)
    assert ratio.interval() is None and ratio.p_value() is None
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


def test_zero_spread_has_no_interval_and_no_test():
    """The same ratio in every block: no spread to measure (p = 0 would call it faster on no evidence)."""
    ratio = Ratio([1.03, 1.03])
    assert ratio.interval() is None and ratio.p_value() is None and ratio.why_no_interval == "2 blocks, zero spread"
    assert decide(ratio, None, 0.05) == NO_INTERVAL


def test_smallest_detectable_ratio_after_holm():
    # (t(0.975, 2) + t(0.8, 2)) x sd / sqrt(3) = (4.302653 + 1.060660) x 0.1 / 1.7320508 = 0.309651 in log
    assert detectable(0.1, 3) == pytest.approx(math.exp(0.309651), rel=1e-5)
    # 3 comparisons: Holm's first step tests at 0.05 / 3; t(1 - 0.05/6, 2) = (2p - 1) / sqrt(2p(1 - p)), p = 0.991667
    q = (2 * 0.9916667 - 1) / math.sqrt(2 * 0.9916667 * (1 - 0.9916667))
    assert detectable(0.1, 3, comparisons=3) == pytest.approx(math.exp((q + 1.060660) * 0.1 / math.sqrt(3)), rel=1e-4)
    assert detectable(0.1, 5) < detectable(0.1, 3) and detectable(0.1, 1) is None
    # the blocks a ratio needs: the first n whose detectable ratio is small enough (checked against the formula)
    n = blocks_for(0.1, 1.10, comparisons=3)
    assert detectable(0.1, n, 3) <= 1.10 < detectable(0.1, n - 1, 3)
    assert blocks_for(0.5, 1.01, cap=50) is None


def test_pooled_noise_weights_by_degrees_of_freedom():
    a, b = Ratio([1.0, math.exp(0.2)]), Ratio([1.0, math.exp(0.1), math.exp(0.2)])  # log sds 0.141421, 0.1
    assert pooled_log_sd([(1, a.log_sd), (2, b.log_sd), (0, None)]) == pytest.approx(math.sqrt((0.02 + 0.02) / 3))
    assert pooled_log_sd([(0, None)]) is None


def exact(*ratios: float) -> list[Bound]:
    return [Bound(math.log(r), math.log(r)) for r in ratios]


def test_the_censored_model_is_the_paired_t_when_nothing_is_censored():
    """Every block observed: estimate, interval and p-value are Ratio's; a censored block whose bound says nothing
    new (right-censored far below every ratio) leaves them as they were."""
    plain = Ratio([1.1, 1.2, 1.3])
    assert CensoredRatio(exact(1.1, 1.2, 1.3)).interval() == plain.interval()
    loose = CensoredRatio(exact(1.1, 1.2, 1.3) + [Bound(math.log(1e-9), math.inf)])
    assert loose.estimate == pytest.approx(plain.estimate, rel=1e-6)
    assert loose.interval() == (pytest.approx(plain.interval()[0], rel=1e-6), pytest.approx(plain.interval()[1],
                                                                                             rel=1e-6))
    assert loose.p_value() == pytest.approx(plain.p_value(), rel=1e-5)


def test_a_censored_block_moves_the_estimate_toward_its_side():
    """A block where the other run missed (its ratio is above 1.5): the estimate rises over the exact blocks' and the
    interval's upper side with it; a block where this run missed pulls it down."""
    plain = Ratio([1.1, 1.2, 1.3])
    above = CensoredRatio(exact(1.1, 1.2, 1.3) + [Bound(math.log(1.5), math.inf)])
    below = CensoredRatio(exact(1.1, 1.2, 1.3) + [Bound(-math.inf, math.log(0.9))])
    assert below.estimate < plain.estimate < above.estimate
    assert above.interval()[1] > plain.interval()[1] and below.interval()[0] < plain.interval()[0]
    # a block where both missed says nothing
    assert CensoredRatio(exact(1.1, 1.2, 1.3) + [Bound(-math.inf, math.inf)]).n == 3


def test_too_few_exact_blocks_give_no_interval():
    found = CensoredRatio(exact(1.2) + [Bound(math.log(1.5), math.inf)] * 2)
    assert found.interval() is None and found.estimate is None and found.p_value() is None
    assert found.why_no_interval == "1 block observed, 2 censored"


def test_exact_signed_rank_test():
    # all 3 blocks on one side: P(W+ = 6) = 1/8, two-sided 2/8
    assert signed_rank_p([0.1, 0.2, 0.3]) == pytest.approx(0.25)
    # ranks 1..4 of |d|, the negative one ranked 1: W+ = 9 of 10; P(W+ >= 9) = 2/16 (sums 9 and 10), two-sided 0.25
    assert signed_rank_p([-0.1, 0.2, 0.3, 0.4]) == pytest.approx(0.25)
    # a miss is the slowest: infinite differences take the top ranks (tied at their midrank)
    assert signed_rank_p([math.inf] * 6) == pytest.approx(2 / 64)
    assert signed_rank_p([0.0, 0.0]) is None  # ties (both missed) drop out


def test_blocks_the_rank_test_needs():
    """2 / 2^n is its smallest p-value: < 0.05 from 6 blocks, < 0.05 / 3 from 7 (Holm over 3 comparisons)."""
    assert rank_test_blocks(0.05, 1) == 6 and rank_test_blocks(0.05, 3) == 7
    assert signed_rank_p([1.0] * 5) >= 0.05 > signed_rank_p([1.0] * 6)


def test_mlperf_summary_counts_a_miss_as_the_slowest():
    assert olympic_mean([3.0, 1.0, 2.0]) == 2.0
    assert olympic_mean([1.0, 2.0, math.inf]) == 2.0 and olympic_mean([1.0, 2.0, 3.0, math.inf]) == 2.5
    assert olympic_mean([1.0, math.inf, math.inf]) == math.inf
