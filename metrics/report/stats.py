"""Statistics of paired repeats (Hoefler and Belli, "Scientific benchmarking of parallel computing systems",
SC15, rules 5-7): a ratio measured in several blocks, its 95 % interval, and what may be said about it.

A block holds one run of every configuration and of its baselines, so a ratio taken within one block (a paired
ratio) cancels the machine's slow drift. Ratios are averaged on the log scale.

- Ratio: every block observed. Student-t interval on the log ratios over blocks, exp'd back, written
  [low, high] and as a x/÷ factor (the interval is symmetric on the log scale, never as a one-sided +-x %).
  One block or zero spread: no interval, no test.
- CensoredRatio: some blocks give only a bound (a run that missed the target is right-censored: its time is
  longer than it ran). A log-normal accelerated-failure-time model of the paired ratio: log ratio ~ Normal(b, s)
  per block, a censored block contributing the probability of its bound; maximum likelihood; interval and
  p-value by profile likelihood, calibrated to Student's t on the blocks observed exactly, so that with nothing
  censored it is the paired t-interval above, to the digit.
- signed_rank_p: the exact paired Wilcoxon signed-rank test, valid under censoring: a run that missed ranks as
  the slowest. It cannot reach p < alpha before rank_test_blocks(alpha, comparisons) blocks.
- Claims: "faster" / "slower" when the test's p-value, Holm-adjusted over the comparisons declared for a
  section, is < 0.05; "equivalent" from a TOST (the 90 % interval inside +-margin); otherwise "cannot tell".
- detectable / blocks_for / power: one power calculation (paired t, alpha split over the comparisons as Holm's
  first step does) for the difference a number of blocks can detect and the blocks a difference needs; power: the
  exact power a number of blocks has at a difference.
"""
import math
import statistics
from dataclasses import dataclass
from functools import cached_property

from scipy.optimize import brentq, minimize_scalar
from scipy.stats import nct, norm
from scipy.stats import t as student_t

LEVEL = 0.95
ALPHA = 1 - LEVEL
POWER = 0.8  # for the smallest detectable difference

FASTER, SLOWER, EQUIVALENT, CANNOT_TELL, NO_INTERVAL = "faster", "slower", "equivalent", "cannot tell", "no interval"


def t_quantile(level: float, df: int) -> float:
    return student_t.ppf(0.5 + level / 2, df)


def factor(interval: tuple[float, float]) -> float:
    """The x/÷ factor of an interval symmetric on the log scale: high / estimate = estimate / low."""
    low, high = interval
    return math.sqrt(high / low)


@dataclass
class Ratio:
    """A ratio measured once per block: its geometric mean and 95 % t-interval."""
    values: list[float]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def logs(self) -> list[float]:
        return [math.log(v) for v in self.values]

    @property
    def estimate(self) -> float:
        return math.exp(statistics.fmean(self.logs))

    @property
    def log_sd(self) -> float | None:
        return statistics.stdev(self.logs) if self.n > 1 else None

    @property
    def log_se(self) -> float | None:
        return self.log_sd / math.sqrt(self.n) if self.n > 1 else None

    @property
    def uncensored(self) -> "Ratio":
        """The blocks observed exactly: all of them (as CensoredRatio.uncensored)."""
        return self

    @property
    def why_no_interval(self) -> str | None:
        """Why this ratio has no interval (and no test): one block, or the same ratio in every block."""
        if self.n < 2:
            return "1 block" if self.n == 1 else "no paired block"
        if self.log_sd == 0:
            return f"{self.n} blocks, zero spread"
        return None

    def interval(self, level: float = LEVEL) -> tuple[float, float] | None:
        """The two-sided t-interval at this level on the log ratios, as ratios; None without spread."""
        if self.why_no_interval:
            return None
        half = t_quantile(level, self.n - 1) * self.log_se
        centre = statistics.fmean(self.logs)
        return math.exp(centre - half), math.exp(centre + half)

    def p_value(self) -> float | None:
        """Two-sided one-sample t-test of mean log ratio = 0 (ratio = 1); None without spread."""
        if self.why_no_interval:
            return None
        return 2 * student_t.sf(abs(statistics.fmean(self.logs)) / self.log_se, self.n - 1)

    def equivalent(self, margin: float, alpha: float = ALPHA) -> bool:
        return equivalent(self.interval(1 - 2 * alpha), margin)


def equivalent(interval_90: tuple[float, float] | None, margin: float) -> bool:
    """TOST: both one-sided tests reject at alpha that the ratio lies outside [1/(1+margin), 1+margin], i.e. the
    (1 - 2 alpha) interval lies inside it."""
    if interval_90 is None:
        return False
    bound = math.log(1 + margin)
    low, high = interval_90
    return -bound < math.log(low) and math.log(high) < bound


@dataclass(frozen=True)
class Bound:
    """A block's log ratio, known to lie in [low, high]: low == high when observed, an infinite side when censored
    (both infinite: the block says nothing)."""
    low: float
    high: float

    @property
    def exact(self) -> bool:
        return self.low == self.high

    @property
    def informative(self) -> bool:
        return not (math.isinf(self.low) and math.isinf(self.high))


def calibrated_threshold(level: float, n: int) -> float:
    """The likelihood-ratio threshold that makes a profile-likelihood interval over n exact normal observations the
    Student-t interval: n log(1 + t^2 / (n - 1))."""
    return n * math.log1p(t_quantile(level, n - 1) ** 2 / (n - 1))


class CensoredRatio:
    """A paired ratio with right- or left-censored blocks: the log-normal AFT model of the module's docstring.
    With every block exact it equals Ratio on the same values."""
    SEARCH = 20.0  # how far (in log ratio) an interval's side is searched before it is called unbounded

    def __init__(self, bounds: list[Bound]):
        self.bounds = [b for b in bounds if b.informative]
        self.exact = [b.low for b in self.bounds if b.exact]
        self.censored = [b for b in self.bounds if not b.exact]

    @property
    def n(self) -> int:
        """Blocks that say something about the ratio."""
        return len(self.bounds)

    @cached_property
    def uncensored(self) -> Ratio:
        return Ratio([math.exp(v) for v in self.exact])

    @property
    def why_no_interval(self) -> str | None:
        if len(self.exact) < 2 or statistics.pstdev(self.exact) == 0:
            found = self.uncensored.why_no_interval or "zero spread"
            return found + (f" observed, {len(self.censored)} censored" if self.censored else "")
        return None

    # The likelihood.

    def log_likelihood(self, centre: float, log_sd: float) -> float:
        sd = math.exp(log_sd)
        total = sum(norm.logpdf(x, centre, sd) for x in self.exact)
        for b in self.censored:
            if math.isinf(b.high):
                total += norm.logsf(b.low, centre, sd)
            elif math.isinf(b.low):
                total += norm.logcdf(b.high, centre, sd)
            else:
                total += math.log(max(norm.cdf(b.high, centre, sd) - norm.cdf(b.low, centre, sd), 1e-300))
        return total

    def profile(self, centre: float) -> float:
        """The log-likelihood at this log ratio, maximised over the spread."""
        spread = max(statistics.pstdev(self.exact), 1e-6)
        found = minimize_scalar(lambda s: -self.log_likelihood(centre, s), method="bounded",
                                bounds=(math.log(spread) - 8, math.log(spread) + 8), options={"xatol": 1e-10})
        return -found.fun

    @cached_property
    def fit(self) -> tuple[float, float]:
        """(maximum-likelihood log ratio, its log-likelihood)."""
        centre = statistics.fmean(self.exact)
        low, high = centre - self.SEARCH, centre + self.SEARCH
        found = minimize_scalar(lambda c: -self.profile(c), method="bounded", bounds=(low, high),
                                options={"xatol": 1e-10})
        return found.x, -found.fun

    def statistic(self, centre: float) -> float:
        """Twice the log-likelihood ratio of the fit against this log ratio."""
        return max(0.0, 2 * (self.fit[1] - self.profile(centre)))

    # What Ratio offers.

    @property
    def estimate(self) -> float | None:
        if not self.censored:
            return self.uncensored.estimate if self.exact else None
        return None if self.why_no_interval else math.exp(self.fit[0])

    def interval(self, level: float = LEVEL) -> tuple[float, float] | None:
        if not self.censored or self.why_no_interval:
            return self.uncensored.interval(level) if not self.censored else None
        threshold = calibrated_threshold(level, len(self.exact))
        best = self.fit[0]

        def side(direction: int) -> float:
            far = best + direction * self.SEARCH
            if self.statistic(far) < threshold:
                return math.inf * direction
            return brentq(lambda c: self.statistic(c) - threshold, *sorted((best, far)), xtol=1e-10)
        return math.exp(side(-1)), math.exp(side(1))

    def p_value(self) -> float | None:
        """The likelihood-ratio test of ratio = 1, mapped to Student's t as the interval is."""
        if not self.censored or self.why_no_interval:
            return self.uncensored.p_value() if not self.censored else None
        n = len(self.exact)
        t = math.sqrt((n - 1) * math.expm1(self.statistic(0.0) / n))
        return 2 * student_t.sf(t, n - 1)

    def equivalent(self, margin: float, alpha: float = ALPHA) -> bool:
        return equivalent(self.interval(1 - 2 * alpha), margin)


def signed_rank_p(differences: list[float]) -> float | None:
    """Exact two-sided paired Wilcoxon signed-rank p-value of these differences (log ratios; +-inf where one run of
    the pair missed: it ranks as the slowest); zeros (ties, or both missed) are dropped. None without any."""
    kept = [d for d in differences if d != 0 and not math.isnan(d)]
    n = len(kept)
    if not n:
        return None
    ordered = sorted(range(n), key=lambda i: abs(kept[i]))
    twice_rank = [0] * n  # midranks for ties, doubled to stay integers
    i = 0
    while i < n:
        j = i
        while j + 1 < n and abs(kept[ordered[j + 1]]) == abs(kept[ordered[i]]):
            j += 1
        for k in range(i, j + 1):
            twice_rank[ordered[k]] = i + j + 2
        i = j + 1
    counts = {0: 1}  # the null distribution of the doubled positive rank sum: every sign equally likely
    for r in twice_rank:
        shifted = dict(counts)
        for total, ways in counts.items():
            shifted[total + r] = shifted.get(total + r, 0) + ways
        counts = shifted
    observed = sum(r for r, d in zip(twice_rank, kept) if d > 0)
    below = sum(w for total, w in counts.items() if total <= observed)
    above = sum(w for total, w in counts.items() if total >= observed)
    return min(1.0, 2 * min(below, above) / 2 ** n)


def rank_test_blocks(alpha: float = ALPHA, comparisons: int = 1) -> int:
    """The fewest blocks with a difference for which the exact signed-rank test can reach p < alpha after Holm over
    this many comparisons: its smallest p-value is 2 / 2^n (every block on one side), times the comparisons."""
    n = 1
    while comparisons * 2 / 2 ** n >= alpha:
        n += 1
    return n


def olympic_mean(values: list[float]) -> float:
    """MLPerf's summary of repeated times: drop the fastest and the slowest (with 3 or more), mean of the rest; a
    miss (inf) counts as the slowest, so a second miss makes it inf."""
    ordered = sorted(values)
    kept = ordered[1:-1] if len(ordered) >= 3 else ordered
    return math.inf if any(math.isinf(v) for v in kept) else statistics.fmean(kept)


def holm(p_values: list[float | None]) -> list[float | None]:
    """Holm-adjusted p-values (step-down, family-wise error <= alpha); None (no test) stays None and does not
    count as a comparison."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, index) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        adjusted[index] = running
    return adjusted


def decide(ratio, adjusted_p: float | None, margin: float, faster: bool | None = None) -> str:
    """What may be said of a ratio (> 1: the first is faster) given the Holm-adjusted p-value of the test that
    decides it (None: no test) and, where that test is not the ratio's own, the direction it found."""
    if adjusted_p is not None and adjusted_p < ALPHA:
        return FASTER if (ratio.estimate > 1 if faster is None else faster) else SLOWER
    if ratio.equivalent(margin):
        return EQUIVALENT
    if adjusted_p is None and ratio.interval() is None:
        return NO_INTERVAL
    return CANNOT_TELL


def detectable(log_sd: float, blocks: int, comparisons: int = 1, alpha: float = ALPHA,
               power: float = POWER) -> float | None:
    """The smallest ratio a paired t-test over `blocks` blocks detects with this power at this sd of the log
    ratios, as its x/÷ factor (e.g. 1.10: a ratio beyond 1.10 or below 1/1.10), alpha split over the comparisons
    as the first step of Holm's correction does (normal-theory approximation with t quantiles)."""
    if blocks < 2:
        return None
    df = blocks - 1
    effect = (student_t.ppf(1 - alpha / comparisons / 2, df) + student_t.ppf(power, df)) * log_sd / math.sqrt(blocks)
    return math.exp(effect)


def blocks_for(log_sd: float, ratio: float, comparisons: int = 1, cap: int = 1000) -> int | None:
    """The fewest blocks whose detectable() factor is at most `ratio` (e.g. 1.10), or None beyond the cap."""
    return next((n for n in range(2, cap + 1) if detectable(log_sd, n, comparisons) <= ratio), None)


def power(log_sd: float, blocks: int, effect: float, comparisons: int = 1, alpha: float = ALPHA) -> float | None:
    """The power of the two-sided paired t-test over `blocks` blocks to detect a ratio of x/÷effect at this sd of
    the log ratios, alpha split over the comparisons as in detectable() (exact: noncentral t)."""
    if blocks < 2:
        return None
    df = blocks - 1
    critical = student_t.ppf(1 - alpha / comparisons / 2, df)
    shift = math.log(effect) * math.sqrt(blocks) / log_sd
    return float(nct.sf(critical, df, shift) + nct.sf(critical, df, -shift))  # the lower tail by symmetry


def pooled_log_sd(spreads: list[tuple[int, float]]) -> float | None:
    """sd of log ratios pooled over comparisons, each (degrees of freedom, sd), weighted by degrees of freedom."""
    found = [(df, sd) for df, sd in spreads if df > 0 and sd is not None]
    total = sum(df for df, _ in found)
    return math.sqrt(sum(df * sd * sd for df, sd in found) / total) if total else None
