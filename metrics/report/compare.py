"""Comparisons on the primary figure, declared before the data: every configuration against its equal-resource
baseline and every pair of configurations, one Holm family per section; the control arm against the baseline it
repeats, apart (the noise floor).

A comparison pairs the two configurations' runs by block, leaving out the blocks where either run is unfaithful
(metrics/report/runs.py Run.unfaithful). Its ratio is > 1 when `this` is the faster: time-to-target of the other
/ this one's (metrics.report.stats.CensoredRatio: a miss is censored, never dropped), throughput of this one / the
other's (metrics.report.stats.Ratio). The test behind a claim: the paired t-test where every block was observed, the
exact signed-rank test (a miss ranks as the slowest) where some block was censored.
"""
import math
import statistics
from dataclasses import dataclass, field

from metrics.report.baselines import averaging, completed_throughput
from metrics.report.primary import Observation, Primary, time_observation
from metrics.report.runs import Group, Run
from metrics.report.stats import Bound, CensoredRatio, Ratio, decide, holm, signed_rank_p

PAIRED_T, RANK_TEST = "paired t-test", "exact signed-rank test (a miss ranks as the slowest)"


@dataclass(frozen=True)
class LeftOut:
    """An unfaithful run whose block a comparison left out, with the figure that failed."""
    block: object
    label: str
    why: str

    def __str__(self) -> str:
        return f"block {self.block}, {self.label}: {self.why}"


@dataclass
class Comparison:
    this: Group
    other: Group
    primary: Primary
    ratio: Ratio | CensoredRatio = None
    blocks: int = 0             # blocks holding a faithful run of both
    used: list = field(default_factory=list)  # those blocks' keys
    exact_logs: dict = field(default_factory=dict)  # block -> its log ratio, where observed exactly (time figure)
    censored: int = 0           # of those, blocks where a run did not reach the target (or crossed at once)
    rank_p: float | None = None
    left_out: list[LeftOut] = field(default_factory=list)  # unfaithful runs whose blocks were left out
    adjusted_p: float | None = None  # Holm-adjusted over the section's declared comparisons
    family: int = 1
    signs: int = 0  # blocks where this one was faster minus blocks where it was slower (rank test's direction)
    margin: float = 0.05  # of the equivalence test

    @property
    def test(self) -> str:
        return RANK_TEST if self.censored else PAIRED_T

    @property
    def p(self) -> float | None:
        """The p-value of the test that decides the claim."""
        return self.rank_p if self.censored else self.ratio.p_value()

    @property
    def decision(self) -> str:
        """metrics.report.stats.decide on the deciding test (under censoring the rank test, with its own direction)."""
        tested = self.adjusted_p if self.p is not None else None
        return decide(self.ratio, tested, self.margin, self.signs > 0 if self.censored else None)


def block_runs(group: Group) -> dict:
    """block -> the group's runs in it."""
    found: dict = {}
    for run in group.runs:
        found.setdefault(run.block, []).append(run)
    return found


def block_observation(runs: list[Run]) -> Observation:
    """One block's time-to-target of a group: its run's; several runs in one block (runs outside any sweep): their
    geometric mean where all crossed exactly, else the slowest (a miss if any missed)."""
    found = [time_observation(r) for r in runs]
    if len(found) == 1:
        return found[0]
    if all(o.exact for o in found):
        mean = statistics.geometric_mean([o.low for o in found])
        return Observation(mean, mean, True)
    return max(found, key=lambda o: o.order)


def rank_difference(this: Observation, other: Observation) -> float:
    """The signed-rank test's difference (> 0: this one faster): the log ratio where both crossed exactly, else
    +-inf by the MLPerf order (a miss the slowest, a crossing at the first evaluation the fastest), 0 for a tie."""
    if this.exact and other.exact:
        return math.log(other.low / this.low)
    if this.order == other.order:
        return 0.0
    return math.inf if this.order < other.order else -math.inf


def compare(this: Group, other: Group, primary: Primary, margin: float = 0.05) -> Comparison:
    """this against other on the primary figure, paired by block over faithful runs."""
    ours, theirs = block_runs(this), block_runs(other)
    shared = sorted(ours.keys() & theirs.keys(), key=str)
    left_out, used = [], []
    for block in shared:
        unfaithful = [LeftOut(block[1], label, "; ".join(run.unfaithful()))
                      for label, runs in ((this.label, ours[block]), (other.label, theirs[block]))
                      for run in runs if run.unfaithful()]
        left_out += unfaithful
        if not unfaithful:
            used.append(block)
    found = Comparison(this, other, primary, left_out=left_out, margin=margin, used=used)
    if not primary.is_time:
        ratios = []
        for block in used:
            top = [v for v in map(completed_throughput, ours[block]) if v]
            bottom = [v for v in map(completed_throughput, theirs[block]) if v]
            if top and bottom:
                ratios.append(statistics.geometric_mean(top) / statistics.geometric_mean(bottom))
        found.ratio, found.blocks = Ratio(ratios), len(ratios)
        return found
    bounds, differences = [], []
    for block in used:
        mine, yours = block_observation(ours[block]), block_observation(theirs[block])
        (my_low, my_high), (your_low, your_high) = mine.log_bounds(), yours.log_bounds()
        bounds.append(Bound(your_low - my_high, your_high - my_low))
        if bounds[-1].exact:
            found.exact_logs[block] = bounds[-1].low
        differences.append(rank_difference(mine, yours))
    found.ratio = CensoredRatio(bounds)
    found.blocks = len(used)
    found.censored = sum(not b.exact for b in bounds)
    found.rank_p = signed_rank_p(differences)
    found.signs = sum(d > 0 for d in differences) - sum(d < 0 for d in differences)
    return found


def declared_pairs(groups: list[Group]) -> list[tuple[Group, Group]]:
    """The section's comparisons, fixed by its configurations alone (never by their results): every averaging
    configuration against its equal-resource baseline, then every pair of averaging configurations, in label
    order."""
    configurations = sorted(averaging(groups), key=lambda g: g.label)
    pairs = [(g, g.baseline) for g in configurations if g.baseline]
    pairs += [(a, b) for i, a in enumerate(configurations) for b in configurations[i + 1:]]
    return pairs


def family(groups: list[Group], primary: Primary, margin: float, declared: int | None = None) -> list[Comparison]:
    """The declared comparisons with their Holm-adjusted p-values: one family of `declared` comparisons (the
    sweep's plan) or of those here; a declared comparison without a test counts with p = 1."""
    found = [compare(a, b, primary, margin) for a, b in declared_pairs(groups)]
    size = max(declared or 0, len(found))
    tested = [c.p if c.p is not None else 1.0 for c in found] + [1.0] * (size - len(found))
    for comparison, adjusted in zip(found, holm(tested)):
        comparison.adjusted_p, comparison.family = adjusted, size
    return found


def control_comparison(baseline: Group, primary: Primary) -> Comparison | None:
    """The baseline against its control arm (its second run in each block): a ratio of 1 up to noise."""
    return compare(baseline, baseline.control, primary) if baseline.control else None
