"""Statistics of paired repeats (Hoefler and Belli, SC15, rules 5-7): ratios per block on the log scale, paired-t
intervals and tests, claims under Holm's correction (methods.yaml report.claims), and the power that plans blocks."""
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from scipy.optimize import brentq, minimize, minimize_scalar
from scipy.special import log_ndtr, ndtr
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
    """A ratio counted once per block, on the log scale: a log-normal model of the blocks, each observed exactly
    (`values`) or known only to lie between two ratios (`censored`: a run missed the target or failed; 0 or inf: open
    on that side), fitted by maximum likelihood. Every block exact: the paired t (geometric mean, t-interval, t-test).
    Else interval and tests invert the likelihood ratio's signed root on a t of the exact blocks' df. The model's sd
    is at least `sd_floor` (the section's pooled noise, on `floor_df` degrees of freedom), and is that floor, on its
    df, where fewer than 2 blocks are exact."""
    values: list[float]
    censored: list[tuple[float, float]] = field(default_factory=list)
    dropped: int = 0  # blocks that say nothing of the ratio (both missed, or both failed), left out
    sd_floor: float = 0.0
    floor_df: int = 0
    fits: dict = field(default_factory=dict, repr=False, compare=False)  # (sd_floor, floor_df) -> its fit

    @property
    def n(self) -> int:
        return len(self.values) + len(self.censored)

    @property
    def imputed(self) -> int:
        """Blocks not observed exactly (censored)."""
        return len(self.censored)

    @property
    def logs(self) -> list[float]:
        return [math.log(v) for v in self.values]

    @property
    def log_sd(self) -> float | None:
        """The sample sd of the exact blocks' log ratios."""
        return statistics.stdev(self.logs) if len(self.values) > 1 else None

    @property
    def uncensored(self) -> "Ratio":
        """The blocks observed exactly."""
        return Ratio(self.values)

    @cached_property
    def fitted_sd(self) -> float | None:
        """The model's sd: the sample sd where every block is exact; with censored blocks its maximum-likelihood
        estimate x sqrt(n / (n - 1)), the sample sd's correction; None under 2 exact blocks."""
        if not self.censored or not (sd := self.log_sd):
            return self.log_sd
        logs, low, high = self.arrays()
        found = minimize(lambda x: -log_likelihood(x[0], math.exp(x[1]), logs, low, high),
                         [statistics.fmean(self.logs), math.log(sd)], method="Nelder-Mead")
        return math.exp(found.x[1]) * math.sqrt(self.n / (self.n - 1))

    @property
    def df(self) -> int:
        return len(self.values) - 1 if len(self.values) > 1 else self.floor_df

    @property
    def spread(self) -> float | None:
        """The sd the interval and the tests use: the model's, at least the floor; the floor under 2 exact blocks."""
        if len(self.values) < 2:
            return self.sd_floor if self.floor_df and self.sd_floor else None
        return None if (sd := self.fitted_sd) is None else max(sd, self.sd_floor)

    @property
    def why_no_interval(self) -> str | None:
        """Why this ratio has no interval (and no test): no block, fewer than 2 exact ones and no pooled noise, or
        the same ratio in every block."""
        if self.n == 0 or self.n == 1 and not self.floor_df:
            return "1 block" if self.n == 1 else "no paired block"
        if self.spread is None:
            return f"{len(self.values)} of {self.n} blocks observed exactly, no pooled noise"
        if self.spread == 0:
            return f"{self.n} blocks, zero spread"
        return None

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        with np.errstate(divide="ignore"):
            low, high = np.log(np.array(self.censored, dtype=float).reshape(-1, 2)).T
        return np.array(self.logs), low, high

    def fit(self) -> tuple[float, float, Callable[[float], float]]:
        """The centre (a log ratio; -inf or inf where the likelihood rises without end, every block censored on one
        side), the finite point the likelihood peaks at, and the likelihood ratio's signed root at a log ratio
        (where all blocks are exact: the t-statistic)."""
        key = (self.sd_floor, self.floor_df)
        if key not in self.fits:
            self.fits[key] = self.censored_fit() if self.censored else self.exact_fit()
        return self.fits[key]

    def exact_fit(self) -> tuple[float, float, Callable[[float], float]]:
        centre, se = statistics.fmean(self.logs), (self.spread or math.nan) / math.sqrt(self.n)
        return centre, centre, lambda at: (centre - at) / se

    def censored_fit(self) -> tuple[float, float, Callable[[float], float]]:
        logs, low, high = self.arrays()
        sd = self.spread or math.nan
        points = np.concatenate([logs, low, high])
        points = points[np.isfinite(points)]
        edges = (points.min() - 10 * sd, points.max() + 10 * sd)
        if not len(logs) and (np.all(np.isposinf(high)) or np.all(np.isneginf(low))):  # rises without end
            centre = math.inf if np.all(np.isposinf(high)) else -math.inf
            best, top = edges[1] if centre > 0 else edges[0], 0.0
        else:
            found = minimize_scalar(lambda m: -log_likelihood(m, sd, logs, low, high), bounds=edges, method="bounded",
                                    options={"xatol": 1e-6 * sd})
            centre = best = float(found.x)
            top = -float(found.fun)

        def root(at: float) -> float:
            rise = math.sqrt(max(0.0, 2 * (top - log_likelihood(at, sd, logs, low, high))))
            return rise if at < centre else -rise
        return centre, best, root

    def log_end(self, side: int, quantile: float) -> float:
        """The end of the interval on one side (-1: low, 1: high): where the signed root reaches -side x quantile."""
        centre, best, root = self.fit()
        if side * centre == math.inf:
            return centre
        start, step = best, self.spread or 1.0
        for _ in range(60):
            end = start + side * step
            if side * root(end) + quantile <= 0:
                return brentq(lambda at: side * root(at) + quantile, min(start, end), max(start, end))
            start, step = end, 2 * step
        return side * math.inf

    @property
    def estimate(self) -> float:
        """The geometric mean (the model's centre); where the likelihood rises without end, the interval's finite
        end (a bound, `bound`); without an interval, the geometric mean of the exact blocks and finite censored ends."""
        if not self.censored:
            return math.exp(statistics.fmean(self.logs)) if self.values else 1.0
        if self.why_no_interval:
            logs, low, high = self.arrays()
            points = [p for p in np.concatenate([logs, low, high]) if math.isfinite(p)]
            return math.exp(statistics.fmean(points)) if points else 1.0
        centre = self.fit()[0]
        if math.isfinite(centre):
            return math.exp(centre)
        lower, upper = self.interval() or (1.0, 1.0)
        return upper if centre < 0 else lower

    @property
    def bound(self) -> str:
        """"≤ " or "≥ " where the estimate is a bound: no exact block, every block censored on that side."""
        if self.values or not self.censored:
            return ""
        _, low, high = self.arrays()
        return "≥ " if np.all(np.isposinf(high)) else "≤ " if np.all(np.isneginf(low)) else ""

    def interval(self, level: float = LEVEL) -> tuple[float, float] | None:
        """The two-sided interval at this level, as ratios (the t-interval where all blocks are exact); None without
        spread."""
        if self.why_no_interval or (spread := self.spread) is None:
            return None
        quantile = student_t.ppf(0.5 + level / 2, self.df)
        if not self.censored:
            half = quantile * spread / math.sqrt(self.n)
            centre = statistics.fmean(self.logs)
            return math.exp(centre - half), math.exp(centre + half)
        return math.exp(self.log_end(-1, quantile)), math.exp(self.log_end(1, quantile))

    def p_value(self) -> float | None:
        """Two-sided test of ratio = 1 (where all exact: the one-sample t-test of mean log ratio = 0); None without
        spread."""
        if self.why_no_interval:
            return None
        return 2 * student_t.sf(abs(self.fit()[2](0.0)), self.df)

    def equivalence_p(self, smallest_effect: float) -> float | None:
        """TOST p-value that the ratio lies inside [1/smallest_effect, smallest_effect] (the larger one-sided p)."""
        if self.why_no_interval:
            return None
        root, bound = self.fit()[2], math.log(smallest_effect)
        return max(student_t.sf(root(-bound), self.df), student_t.sf(-root(bound), self.df))

    @property
    def direction(self) -> str:
        centre = self.fit()[0] if self.censored and not self.why_no_interval else math.log(self.estimate)
        return FASTER if centre > 0 else SLOWER

    def claims(self, smallest_effect: float) -> dict[str, float]:
        """The claim this ratio may support, with the p-value of its test: its direction where its 95 % interval
        excludes 1, else equivalence within smallest_effect (TOST); none without spread. A miss is evidence through
        the censored likelihood, never a veto."""
        if self.why_no_interval:
            return {}
        claim = self.direction if excludes_one(self) else EQUIVALENT
        p = self.p_value() if claim != EQUIVALENT else self.equivalence_p(smallest_effect)
        return {} if p is None else {claim: p}


def log_likelihood(centre: float, sd: float, logs: np.ndarray, low: np.ndarray, high: np.ndarray) -> float:
    """A normal(centre, sd) model's log-likelihood of exact log ratios and of ones known to lie in [low, high]."""
    exact = -0.5 * float(np.sum(((logs - centre) / sd) ** 2)) - len(logs) * math.log(sd)
    upper, lower = (high - centre) / sd, (low - centre) / sd
    with np.errstate(divide="ignore", invalid="ignore"):
        between = np.where(np.isneginf(lower), log_ndtr(upper), np.where(np.isposinf(upper), log_ndtr(-lower),
                                                                         np.log(ndtr(upper) - ndtr(lower))))
    return exact + float(np.sum(between))


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
