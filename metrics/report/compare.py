"""Comparisons on the primary figure, declared before the data and paired by block (Methods: pairing, claims): each
configuration against its equal-resource baseline and every pair, one Holm family per section; the control arm apart."""
import math
import statistics
from dataclasses import dataclass, field

from metrics.report.baselines import averaging, completed_throughput
from metrics.report.primary import Observation, Primary, time_observation
from metrics.report.runs import Block, Group, Run, block_runs
from metrics.report.stats import EQUIVALENT, WITHHELD, Ratio, decide, holm, pooled_log_sd

PAIRED_T, TOST = "paired t-test", "TOST"


@dataclass(frozen=True)
class LeftOut:
    """An unfaithful run whose block a comparison left out, with the figure that failed."""
    block: int | None
    label: str
    why: str

    def __str__(self) -> str:
        return f"block {self.block}, {self.label}: {self.why}"


@dataclass
class Comparison:
    this: Group
    other: Group
    primary: Primary
    ratio: Ratio
    blocks: int = 0             # blocks holding a faithful run of both
    used: list[Block] = field(default_factory=list)  # those blocks' keys
    exact_logs: dict[Block, float] = field(default_factory=dict)  # block -> its log ratio, where observed exactly
    censored: int = 0           # of those, blocks where a run missed the target (or failed): counted at its horizon
    left_out: list[LeftOut] = field(default_factory=list)  # unfaithful runs whose blocks were left out
    adjusted_p: float | None = None  # Holm-adjusted over the section's declared comparisons
    family: int = 1
    smallest_effect: float = 1.25  # the equivalence margin, a ratio x/÷
    withheld: bool = False  # under a refused verdict: no claim

    @property
    def permitted(self) -> dict[str, float]:
        return self.ratio.claims(self.smallest_effect)

    @property
    def claim(self) -> str | None:
        """The permitted claim with the smallest p-value: the one decided (None: no test)."""
        return min(self.permitted, key=self.permitted.__getitem__, default=None)

    @property
    def p(self) -> float | None:
        return None if (claim := self.claim) is None else self.permitted.get(claim)

    @property
    def test(self) -> str:
        return TOST if self.claim == EQUIVALENT else PAIRED_T

    @property
    def decision(self) -> str:
        return WITHHELD if self.withheld else decide(self.ratio, self.claim, self.adjusted_p)


def block_observation(runs: list[Run]) -> Observation:
    """A group's time-to-target in one block; several runs there (outside any sweep): their geometric mean where all
    crossed exactly, else the slowest."""
    found = [time_observation(r) for r in runs]
    if len(found) == 1:
        return found[0]
    if all(o.exact for o in found):
        mean = statistics.geometric_mean([o.low for o in found])
        return Observation(mean, mean, True)
    return max(found, key=lambda o: o.order)


def counted_times(mine: Observation, yours: Observation) -> tuple[float, float, bool, bool]:
    """The times a block counts for a pair, and whether each side is favoured (counted at its best case): a miss at its
    horizon but never ahead of the other; a crossing at the first evaluation at its next one, never behind the other;
    both missed, or both crossed at the first evaluation: a tie, favouring both."""
    if mine.exact and yours.exact:
        return mine.low, yours.low, False, False
    if mine.order[0] == yours.order[0]:
        return 1.0, 1.0, True, True
    fast, slow = sorted((mine, yours), key=lambda o: o.order)
    fast_time = fast.low if fast.exact else min(fast.high, slow.low if slow.exact else math.inf)
    if math.isinf(fast_time):  # a crossing at the first evaluation with no later one, against a miss
        fast_time = slow.low or 1.0
    slow_time = slow.low if slow.exact else max(slow.low, fast_time)
    return (fast_time, slow_time, False, True) if mine is fast else (slow_time, fast_time, True, False)


def block_throughput(runs: list[Run]) -> tuple[float, bool]:
    """A group's throughput in one block (geometric mean, failed runs' too; 0.0: none) and whether all completed."""
    recorded = [v for v in (r.summary.throughput_samples_per_s for r in runs) if v]
    completed = all(completed_throughput(r) for r in runs)
    return (statistics.geometric_mean(recorded) if recorded else 0.0), completed


def counted_throughputs(mine: tuple[float, bool], yours: tuple[float, bool]) -> tuple[float, float, bool, bool]:
    """The throughputs a block counts for a pair, and whether each is its run's best case: a completed run's as is;
    a failed run's (the worst outcome) at most the other's (at best a tie); both failed: a tie."""
    (my_value, my_done), (your_value, your_done) = mine, yours
    if my_done and your_done:
        return my_value, your_value, False, False
    if not my_done and not your_done:
        return 1.0, 1.0, True, True
    if my_done:
        return my_value, min(your_value or my_value, my_value), False, True
    return min(my_value or your_value, your_value), your_value, True, False


def compare(this: Group, other: Group, primary: Primary, smallest_effect: float = 1.25) -> Comparison:
    """this against other on the primary figure, paired by block over faithful runs."""
    ours, theirs = block_runs(this), block_runs(other)
    shared = sorted(ours.keys() & theirs.keys(), key=str)
    left_out, used = list[LeftOut](), list[Block]()
    for block in shared:
        unfaithful = [LeftOut(block[1], label, "; ".join(run.unfaithful()))
                      for label, runs in ((this.label, ours[block]), (other.label, theirs[block]))
                      for run in runs if run.unfaithful()]
        left_out += unfaithful
        if not unfaithful:
            used.append(block)
    values, exact, exact_logs, favours_this, favours_other = list[float](), list[bool](), {}, 0, 0
    for block in used:
        if primary.is_time:  # ratio: the other's time / this one's
            mine, yours, mine_favoured, yours_favoured = counted_times(block_observation(ours[block]),
                                                                       block_observation(theirs[block]))
            value = yours / mine
        else:  # ratio: this one's throughput / the other's
            mine, yours, mine_favoured, yours_favoured = counted_throughputs(block_throughput(ours[block]),
                                                                             block_throughput(theirs[block]))
            value = mine / yours
        values.append(value)
        exact.append(not (mine_favoured or yours_favoured))
        favours_this += mine_favoured
        favours_other += yours_favoured
        if exact[-1]:
            exact_logs[block] = math.log(value)
    ratio = Ratio(values, exact, favours_this, favours_other)
    return Comparison(this, other, primary, ratio, len(used), used, exact_logs, ratio.imputed, left_out,
                      smallest_effect=smallest_effect)


def declared_pairs(groups: list[Group]) -> list[tuple[Group, Group]]:
    """Fixed by the configurations, never their results: each against its baseline, then every pair, in label order."""
    configurations = sorted(averaging(groups), key=lambda g: g.label)
    return ([(g, g.baseline) for g in configurations if g.baseline]
            + [(a, b) for i, a in enumerate(configurations) for b in configurations[i + 1:]])


def family(groups: list[Group], primary: Primary, smallest_effect: float,
           declared: int | None = None) -> list[Comparison]:
    """The declared comparisons, Holm-adjusted over a family of `declared` (the plan's) or of those here (no test:
    p = 1), each spread floored at the section's pooled noise (blocks observed exactly)."""
    found = [compare(a, b, primary, smallest_effect) for a, b in declared_pairs(groups)]
    exact = [c.ratio.uncensored for c in found]
    floor = pooled_log_sd([(r.n - 1, r.log_sd) for r in exact if r.n > 1]) or 0.0
    for comparison in found:
        comparison.ratio.sd_floor = floor
    size = max(declared or 0, len(found))
    tests = [p if p is not None else 1.0 for c in found for p in (c.ratio.p_value(), c.ratio.equivalence_p(
        smallest_effect))]  # both tests of every comparison: a claim's test is chosen by the data
    adjusted = holm(tests + [1.0] * (size - len(found)), [i // 2 for i in range(len(tests))]
                    + list(range(len(found), size)))
    for index, comparison in enumerate(found):
        comparison.adjusted_p, comparison.family = adjusted[2 * index + (comparison.claim == EQUIVALENT)], size
    return found


def control_comparison(baseline: Group, primary: Primary) -> Comparison | None:
    """The baseline against its control arm (its second run in each block): a ratio of 1 up to noise."""
    return compare(baseline, baseline.control, primary) if baseline.control else None
