"""Statistics of paired repeats (Hoefler and Belli, SC15, rules 5-7): ratios per block on the log scale, paired-t
intervals and tests, claims under Holm's correction (methods.yaml report.claims), and the power that plans blocks."""
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy.stats import chi2, nct
from scipy.stats import t as student_t

LEVEL = 0.95
ALPHA = 1 - LEVEL
POWER = 0.8  # for the smallest detectable difference

FASTER, SLOWER, EQUIVALENT, CANNOT_TELL, NO_INTERVAL, WITHHELD = ("faster", "slower", "equivalent", "cannot tell",
                                                                  "no interval", "withheld")
EQUIVALENCE_LEVEL = 1 - 2 * ALPHA  # the interval a TOST at ALPHA matches: within the margin whenever the TOST passes

PRIOR_INFLATION = 2.5  # without its own noise rows, a machine plans on this x the noisiest row of any machine, as the
# bound itself (docs/report.md: the largest ratio between two machines' recorded noise)
OWN_MACHINE, PRIOR, EVERY_MACHINE = "own machine", "conservative prior", "every machine"  # what a plan rests on
BASIS = {OWN_MACHINE: "the noise recorded on the machine planned for",
         PRIOR: f"a conservative prior (no noise recorded on the machine planned for: {PRIOR_INFLATION:g} × the "
                "noisiest recorded row of any machine, taken as its upper bound)",
         EVERY_MACHINE: "the noise recorded on every machine, pooled"}


def factor(interval: tuple[float, float]) -> float:
    """The x/÷ factor of an interval symmetric on the log scale: high / estimate = estimate / low."""
    low, high = interval
    return math.sqrt(high / low)


@dataclass
class Ratio:
    """A ratio counted once per block: its geometric mean, 95 % t-interval and t-test. For a paired comparison,
    `exact` marks the blocks observed exactly, `favours_this` / `favours_other` count the blocks counted at one
    side's best case (that side missed), and `sd_floor` is the least log-sd the test assumes."""
    values: list[float]
    exact: list[bool] | None = None
    favours_this: int = 0
    favours_other: int = 0
    sd_floor: float = 0.0

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
        """The sample sd of the log ratios."""
        return statistics.stdev(self.logs) if self.n > 1 else None

    @property
    def spread(self) -> float | None:
        """The sd the interval and the test use: the sample sd, at least the floor."""
        return None if (sd := self.log_sd) is None else max(sd, self.sd_floor)

    @property
    def log_se(self) -> float | None:
        return None if (spread := self.spread) is None else spread / math.sqrt(self.n)

    @property
    def imputed(self) -> int:
        """Blocks not observed exactly (a miss counted at its horizon)."""
        return 0 if self.exact is None else self.n - sum(self.exact)

    @property
    def uncensored(self) -> "Ratio":
        """The blocks observed exactly."""
        if self.exact is None or not self.imputed:
            return Ratio(self.values)
        return Ratio([v for v, e in zip(self.values, self.exact) if e])

    @property
    def why_no_interval(self) -> str | None:
        """Why this ratio has no interval (and no test): one block, or the same ratio in every block."""
        if self.n < 2:
            return "1 block" if self.n == 1 else "no paired block"
        if self.spread == 0:
            return f"{self.n} blocks, zero spread"
        return None

    def interval(self, level: float = LEVEL) -> tuple[float, float] | None:
        """The two-sided t-interval at this level on the log ratios, as ratios; None without spread."""
        if self.why_no_interval or (se := self.log_se) is None:
            return None
        half = student_t.ppf(0.5 + level / 2, self.n - 1) * se
        centre = statistics.fmean(self.logs)
        return math.exp(centre - half), math.exp(centre + half)

    def p_value(self) -> float | None:
        """Two-sided one-sample t-test of mean log ratio = 0 (ratio = 1); None without spread."""
        if self.why_no_interval or (se := self.log_se) is None:
            return None
        return 2 * student_t.sf(abs(statistics.fmean(self.logs)) / se, self.n - 1)

    def equivalence_p(self, smallest_effect: float) -> float | None:
        """TOST p-value that the ratio lies inside [1/smallest_effect, smallest_effect] (the larger one-sided p)."""
        if self.why_no_interval or (se := self.log_se) is None:
            return None
        centre, bound = statistics.fmean(self.logs), math.log(smallest_effect)
        return max(student_t.sf((centre + bound) / se, self.n - 1), student_t.sf((bound - centre) / se, self.n - 1))

    @property
    def direction(self) -> str:
        return FASTER if self.estimate > 1 else SLOWER

    def refused(self, claim: str) -> bool:
        """A claim in favour of a side counted at its best case in some block, or equivalence with any block so."""
        if claim == FASTER:
            return self.favours_this > 0
        if claim == SLOWER:
            return self.favours_other > 0
        return self.imputed > 0

    def claims(self, smallest_effect: float) -> dict[str, float]:
        """The claim this ratio may support, with the p-value of its test: its direction where its 95 % interval
        excludes 1, else equivalence within smallest_effect (TOST); none without spread, or where refused."""
        if self.why_no_interval:
            return {}
        claim = self.direction if excludes_one(self) else EQUIVALENT
        p = self.p_value() if claim != EQUIVALENT else self.equivalence_p(smallest_effect)
        return {} if p is None or self.refused(claim) else {claim: p}


def excludes_one(ratio: Ratio) -> bool:
    """Whether the ratio's 95 % interval excludes 1 (its t-test's p < ALPHA)."""
    interval = ratio.interval()
    return interval is not None and (interval[0] > 1 or interval[1] < 1)


def olympic_mean(values: list[float]) -> float:
    """MLPerf's summary of repeated times: drop the fastest and the slowest (with 3 or more), mean of the rest; a
    miss (inf) counts as the slowest, so a second miss makes it inf."""
    ordered = sorted(values)
    kept = ordered[1:-1] if len(ordered) >= 3 else ordered
    return math.inf if any(math.isinf(v) for v in kept) else statistics.fmean(kept)


def holm(p_values: Sequence[float | None], groups: Sequence[int] | None = None) -> list[float | None]:
    """Holm-adjusted p-values (step-down); None (no test) stays None and is not counted as a comparison. `groups`:
    each test's group, of which at most one null can be true (a comparison's t-test and TOST): each step multiplies
    by the groups left, not the tests (Shaffer's logical constraint)."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    group = groups or range(len(p_values))
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, index) in enumerate(tested):
        running = max(running, min(1.0, len({group[i] for _, i in tested[rank:]}) * p))
        adjusted[index] = running
    return adjusted


def decide(ratio: Ratio, claim: str | None, adjusted_p: float | None) -> str:
    """What may be said of a ratio given its best permitted claim and that claim's Holm-adjusted p-value."""
    if claim is not None and adjusted_p is not None and adjusted_p < ALPHA:
        return claim
    return NO_INTERVAL if ratio.interval() is None else CANNOT_TELL


def detectable(log_sd: float, blocks: int, comparisons: int = 1, alpha: float = ALPHA,
               power: float = POWER) -> float | None:
    """The smallest ratio, as its x/÷ factor, a paired t-test over `blocks` blocks detects with this power at this
    log-sd, alpha split over the comparisons as Holm's first step (normal-theory approximation with t quantiles)."""
    if blocks < 2:
        return None
    df = blocks - 1
    effect = (student_t.ppf(1 - alpha / comparisons / 2, df) + student_t.ppf(power, df)) * log_sd / math.sqrt(blocks)
    return math.exp(effect)


def blocks_for(log_sd: float, ratio: float, comparisons: int = 1, cap: int = 1000) -> int | None:
    """The fewest blocks whose detectable() factor is at most `ratio` (e.g. 1.10), or None beyond the cap."""
    return next((n for n in range(2, cap + 1) if (d := detectable(log_sd, n, comparisons)) is not None and d <= ratio),
                None)


def power(log_sd: float, blocks: int, effect: float, comparisons: int = 1, alpha: float = ALPHA) -> float | None:
    """The power of the two-sided paired t-test over `blocks` blocks to detect a ratio of x/÷effect at this sd of
    the log ratios, alpha split over the comparisons as in detectable() (exact: noncentral t)."""
    if blocks < 2:
        return None
    df = blocks - 1
    critical = student_t.ppf(1 - alpha / comparisons / 2, df)
    shift = math.log(effect) * math.sqrt(blocks) / log_sd
    return float(nct.sf(critical, df, shift) + nct.sf(critical, df, -shift))  # the lower tail by symmetry


def upper_log_sd(log_sd: float, df: int, level: float = LEVEL) -> float:
    """The one-sided upper confidence bound of an sd estimated on df degrees of freedom (chi-square)."""
    return log_sd * math.sqrt(df / chi2.ppf(1 - level, df))


def pooled_log_sd(spreads: Sequence[tuple[int, float | None]]) -> float | None:
    """sd of log ratios pooled over comparisons, each (degrees of freedom, sd), weighted by degrees of freedom."""
    found = [(df, sd) for df, sd in spreads if df > 0 and sd is not None]
    total = sum(df for df, _ in found)
    return math.sqrt(sum(df * sd * sd for df, sd in found) / total) if total else None
