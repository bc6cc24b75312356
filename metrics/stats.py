"""Statistics of paired repeats (Hoefler and Belli, "Scientific benchmarking of parallel computing systems",
SC15, rules 5-7): a ratio measured in several blocks, its 95 % interval, and what may be said about it.

A block holds one run of every configuration and of its baselines, so a ratio taken within one block (a paired
ratio) cancels the machine's slow drift. Ratios are averaged on the log scale: the interval is a Student-t
interval on the log ratios over blocks, exp'd back (never a median interval: too few repeats). Claims:
  - "faster" / "slower": the interval excludes 1 after Holm's correction for the comparisons of a section;
  - "equivalent": a TOST equivalence test (two one-sided t-tests) within +-margin;
  - otherwise "cannot tell", with the noise (the interval's half width, %).
"""
import math
import statistics
from dataclasses import dataclass

from scipy.stats import t as student_t

LEVEL = 0.95
ALPHA = 1 - LEVEL
POWER = 0.8  # for the smallest detectable difference

FASTER, SLOWER, EQUIVALENT, CANNOT_TELL, NO_INTERVAL = "faster", "slower", "equivalent", "cannot tell", "no interval"


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

    def interval(self, level: float = LEVEL) -> tuple[float, float] | None:
        """The two-sided t-interval at this level on the log ratios, as ratios; None with one block."""
        if self.n < 2:
            return None
        half = student_t.ppf(0.5 + level / 2, self.n - 1) * self.log_se
        centre = statistics.fmean(self.logs)
        return math.exp(centre - half), math.exp(centre + half)

    @property
    def noise(self) -> float | None:
        """Half width of the 95 % interval as a fraction of the estimate (the "+-x %" of the verdict)."""
        found = self.interval()
        return None if found is None else max(found[1] / self.estimate - 1, 1 - found[0] / self.estimate)

    def p_value(self) -> float | None:
        """Two-sided one-sample t-test of mean log ratio = 0 (ratio = 1)."""
        if self.n < 2:
            return None
        centre = statistics.fmean(self.logs)
        if self.log_se == 0:
            return 1.0 if centre == 0 else 0.0
        return 2 * student_t.sf(abs(centre) / self.log_se, self.n - 1)

    def equivalent(self, margin: float, alpha: float = ALPHA) -> bool:
        """TOST: both one-sided tests reject at alpha that the ratio lies outside [1/(1+margin), 1+margin]
        (equivalently, the (1 - 2 alpha) interval lies inside it)."""
        if self.n < 2:
            return False
        bound = math.log(1 + margin)
        low, high = self.interval(1 - 2 * alpha)
        return -bound < math.log(low) and math.log(high) < bound


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


def decide(ratio: Ratio, adjusted_p: float | None, margin: float) -> str:
    """What may be said of a ratio (> 1: the first is faster) given its Holm-adjusted p-value."""
    if ratio.n < 2:
        return NO_INTERVAL
    if adjusted_p is not None and adjusted_p < ALPHA:
        return FASTER if ratio.estimate > 1 else SLOWER
    if ratio.equivalent(margin):
        return EQUIVALENT
    return CANNOT_TELL


def detectable(log_sd: float, blocks: int, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """The smallest ratio difference (fraction, e.g. 0.1 = 10 %) a paired t-test over `blocks` blocks detects
    with this power, at this sd of the log ratios (normal-theory approximation with t quantiles)."""
    if blocks < 2:
        return None
    df = blocks - 1
    effect = (student_t.ppf(1 - alpha / 2, df) + student_t.ppf(power, df)) * log_sd / math.sqrt(blocks)
    return math.exp(effect) - 1


def pooled_log_sd(ratios: list[Ratio]) -> float | None:
    """The sd of log ratios pooled over comparisons (weighted by degrees of freedom): the measured noise."""
    found = [(r.n - 1, r.log_sd) for r in ratios if r.n > 1]
    df = sum(d for d, _ in found)
    return math.sqrt(sum(d * sd * sd for d, sd in found) / df) if df else None
