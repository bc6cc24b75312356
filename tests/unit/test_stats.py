"""metrics/report/stats.py against cases computed by hand (df = 2, where Student's t has a closed form:
CDF(t) = 1/2 + t / (2 sqrt(2 + t^2)), quantile(p) = (2p - 1) / sqrt(2 p (1 - p)))."""
import math
import statistics

import pytest
from scipy.stats import t as student_t
from scipy.stats import ttest_1samp

from metrics.report.stats import (CANNOT_TELL, EQUIVALENT, FASTER, NO_INTERVAL, SLOWER, Ratio, blocks_for, decide,
                                  detectable, holm, olympic_mean, pooled_log_sd)

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
    assert ratio.claims(1.25) == {} and decide(ratio, None, None) == NO_INTERVAL


def test_holm_step_down():
    # sorted 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04 -> kept monotone at 0.06; None is no comparison
    assert holm([0.01, 0.04, None, 0.03]) == pytest.approx([0.03, 0.06, None, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    # two comparisons' t-test and TOST (groups 0, 0, 1, 1), at most one null true in each: 0.001 x 2 comparisons left;
    # 0.03 x 2 (both still hold a test) = 0.06; 0.4 x 2 = 0.8; 0.8 x 1 = 0.8 (plain Holm over 4: 0.004, 0.09, ...)
    assert holm([0.03, 0.4, 0.8, 0.001], [0, 0, 1, 1]) == pytest.approx([0.06, 0.8, 0.8, 0.002])


def test_decisions():
    steady = Ratio([math.exp(-0.01), 1.0, math.exp(0.01)])  # mean log 0, sd 0.01, se 0.0057735
    # TOST: t = ln(1.05) / 0.0057735 = 8.4505 on 2 df, one-sided p = 1/2 - t / (2 sqrt(2 + t^2)) = 0.006853
    assert steady.equivalence_p(1.05) == pytest.approx(0.5 - 8.4505 / (2 * math.sqrt(2 + 8.4505 ** 2)), rel=1e-3)
    assert steady.claims(1.05)[EQUIVALENT] < 0.05 and steady.claims(1.01)[EQUIVALENT] > 0.05
    assert decide(steady, EQUIVALENT, holm([steady.equivalence_p(1.05)])[0]) == EQUIVALENT
    assert decide(steady, EQUIVALENT, holm([steady.equivalence_p(1.01)])[0]) == CANNOT_TELL
    faster = Ratio([1.50, 1.52, 1.48])
    slower = Ratio([0.70, 0.71, 0.69])
    assert faster.p_value() < 0.01 and slower.p_value() < 0.01
    assert min(faster.claims(1.25), key=faster.claims(1.25).get) == FASTER
    assert min(slower.claims(1.25), key=slower.claims(1.25).get) == SLOWER
    # the same ratio is "cannot tell" when Holm's correction lifts its p-value over 0.05
    borderline = Ratio([1.1, 1.2, 1.3])
    assert decide(borderline, FASTER, 0.04) == FASTER and decide(borderline, FASTER, 0.08) == CANNOT_TELL


def test_with_every_block_exact_the_model_is_the_paired_t():
    """No censored block: ratio, interval, p and TOST are the paired t's, to the last bit."""
    values = [1.31, 1.18, 1.42, 1.27, 1.36]
    logs = [math.log(v) for v in values]
    centre, se = statistics.fmean(logs), statistics.stdev(logs) / math.sqrt(5)
    ratio = Ratio(values)
    assert ratio.estimate == math.exp(centre)
    half = student_t.ppf(0.975, 4) * se
    assert ratio.interval() == (math.exp(centre - half), math.exp(centre + half))
    assert ratio.p_value() == 2 * student_t.sf(abs(centre) / se, 4)
    assert ratio.p_value() == pytest.approx(ttest_1samp(logs, 0.0).pvalue, rel=1e-12)
    bound = math.log(1.25)
    assert ratio.equivalence_p(1.25) == max(student_t.sf((centre + bound) / se, 4),
                                            student_t.sf((bound - centre) / se, 4))


def test_a_block_censored_to_a_sliver_counts_as_nearly_exact():
    """A block known to lie within 1e-6 of 1.25: the likelihood ratio's signed root is the t-statistic of the five
    blocks (sd x sqrt(n / (n - 1)) is the sample sd), on the exact blocks' 3 df."""
    exact = [1.31, 1.18, 1.42, 1.36]
    ratio = Ratio(exact, [(1.25 * (1 - 1e-6), 1.25 * (1 + 1e-6))])
    logs = [math.log(v) for v in exact + [1.25]]
    t = statistics.fmean(logs) / (statistics.stdev(logs) / math.sqrt(5))
    assert ratio.df == 3 and ratio.n == 5 and ratio.imputed == 1
    assert ratio.fitted_sd == pytest.approx(statistics.stdev(logs), rel=1e-3)
    assert ratio.p_value() == pytest.approx(2 * student_t.sf(t, 3), rel=1e-3)
    assert ratio.estimate == pytest.approx(math.exp(statistics.fmean(logs)), rel=1e-4)


def test_a_miss_is_evidence_not_a_veto():
    """The faster side missed in one block, its horizon bounding the ratio at <= 2.1: still 'faster' (no veto). A
    miss against the estimate's direction (<= 0.9) widens the model's sd and weakens the claim."""
    exact = [2.0, 2.1, 1.95, 2.05, 1.9]
    consistent = Ratio(exact, [(0.0, 2.1)])
    assert consistent.claims(1.25).keys() == {FASTER} and consistent.p_value() < 0.001
    assert consistent.interval()[0] > 1 and consistent.bound == ""
    against = Ratio(exact, [(0.0, 0.9)])
    assert against.fitted_sd > consistent.fitted_sd and against.p_value() > consistent.p_value()


def test_more_blocks_never_lower_the_evidence_where_they_agree():
    """This side is slower (0.45-0.55x) in three exact blocks, then misses in block after block (the ratio at most
    0.6 there): each added censored block lowers the p-value, never raises it (the veto raised it)."""
    exact = [0.5, 0.45, 0.55]
    p_values = [Ratio(exact, [(0.0, 0.6)] * extra).p_value() for extra in range(5)]
    assert all(later <= earlier for earlier, later in zip(p_values, p_values[1:])), p_values
    assert p_values[-1] < p_values[0]


def test_fewer_than_two_exact_blocks_borrow_the_pooled_noise():
    """One exact block: the interval and test use the section's pooled sd (0.1) on its df (4); without it, none.
    Every block censored above (>= 2): the interval is open above and the estimate is its low end, a bound."""
    alone = Ratio([1.2], sd_floor=0.1, floor_df=4)
    half = student_t.ppf(0.975, 4) * 0.1
    assert alone.interval() == pytest.approx((math.exp(math.log(1.2) - half), math.exp(math.log(1.2) + half)))
    assert alone.p_value() == pytest.approx(2 * student_t.sf(math.log(1.2) / 0.1, 4))
    assert Ratio([1.2], sd_floor=0.1).interval() is None
    censored = Ratio([], [(2.0, math.inf), (2.2, math.inf)], sd_floor=0.1, floor_df=4)
    low, high = censored.interval()
    assert 1 < low < 2.2 and high == math.inf and censored.claims(1.25).keys() == {FASTER}
    assert censored.bound == "≥ " and censored.estimate == low
    assert Ratio([], [(2.0, math.inf)] * 2, sd_floor=0.1).why_no_interval == ("0 of 2 blocks observed exactly, no "
                                                                              "pooled noise")


def test_a_comparison_without_a_paired_block_has_no_interval_though_the_section_pooled_noise():
    """Every block left out (all of one side's runs unfaithful): no interval, no test, beside a pooled floor too."""
    empty = Ratio([], sd_floor=0.1, floor_df=4)
    assert empty.why_no_interval == "no paired block"
    assert empty.interval() is None and empty.p_value() is None and empty.equivalence_p(1.25) is None


def test_the_spread_is_floored_so_a_chance_agreement_is_no_claim():
    """Two blocks agreeing to 0.1 %: t = 1000 on 1 df without a floor; at a pooled noise of 0.1 the interval is
    t(0.975, 1) = 12.7062 x 0.1 / sqrt 2 wide on each side."""
    agreeing = Ratio([1.300, 1.301])
    assert agreeing.p_value() < 0.001
    agreeing.sd_floor = 0.1
    centre = (math.log(1.300) + math.log(1.301)) / 2
    low, high = agreeing.interval()
    assert (low, high) == (pytest.approx(math.exp(centre - 12.7062 * 0.1 / math.sqrt(2)), rel=1e-4),
                           pytest.approx(math.exp(centre + 12.7062 * 0.1 / math.sqrt(2)), rel=1e-4))
    assert agreeing.p_value() > 0.05


def test_zero_spread_has_no_interval_and_no_test():
    """The same ratio in every block: no spread to measure (p = 0 would call it faster on no evidence)."""
    ratio = Ratio([1.03, 1.03])
    assert ratio.interval() is None and ratio.p_value() is None and ratio.why_no_interval == "2 blocks, zero spread"
    assert ratio.claims(1.25) == {} and decide(ratio, None, None) == NO_INTERVAL


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


def test_mlperf_summary_counts_a_miss_as_the_slowest():
    assert olympic_mean([3.0, 1.0, 2.0]) == 2.0
    assert olympic_mean([1.0, 2.0, math.inf]) == 2.0 and olympic_mean([1.0, 2.0, 3.0, math.inf]) == 2.5
    assert olympic_mean([1.0, math.inf, math.inf]) == math.inf


def test_a_ratio_without_blocks_supports_no_claim():
    """A comparison whose configurations share no completed block (e.g. one block, baselines off) has no ratio and
    no claim; it must not fail the report."""
    assert Ratio([]).claims(1.25) == {} and Ratio([1.2]).claims(1.25) == {}
