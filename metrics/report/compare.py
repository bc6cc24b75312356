"""Comparisons on the primary figure, declared before the data and paired by block (Methods: pairing, claims): each
configuration against its equal-resource baseline and every pair, one Holm family per section; the control arm apart."""
import math
import statistics
from collections.abc import Sequence
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
    censored: int = 0           # of those, blocks where a run missed the target (or failed): not observed exactly
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


def time_bounds(mine: Observation, yours: Observation) -> tuple[float, float]:
    """Where a block's ratio (the other's time / this one's) lies, from where each time lies: one value where both
    crossed exactly; a miss (right-censored at its horizon) or a crossing at the first evaluation bounds it on one
    side; both missed: 0 to inf, no information."""
    return quotient(yours.low, mine.high), quotient(yours.high, mine.low)


def quotient(top: float, bottom: float) -> float:
    return math.inf if bottom == 0 or math.isinf(top) else 0.0 if math.isinf(bottom) else top / bottom


def block_throughput(runs: list[Run]) -> tuple[float, bool]:
    """A group's throughput in one block (geometric mean, failed runs' too; 0.0: none) and whether all completed."""
    recorded = [v for v in (r.summary.throughput_samples_per_s for r in runs) if v]
    completed = all(completed_throughput(r) for r in runs)
    return (statistics.geometric_mean(recorded) if recorded else 0.0), completed


def throughput_bounds(mine: tuple[float, bool], yours: tuple[float, bool]) -> tuple[float, float]:
    """Where a block's ratio (this one's throughput / the other's) lies: as measured where both completed; a failed
    run (the worst outcome) at most the other's, so at best a tie; both failed: 0 to inf, no information."""
    (my_value, my_done), (your_value, your_done) = mine, yours
    if my_done and your_done:
        return my_value / your_value, my_value / your_value
    if my_done:
        return max(my_value / your_value if your_value else 1.0, 1.0), math.inf
    if your_done:
        return 0.0, min(my_value / your_value, 1.0) if my_value else 1.0
    return 0.0, math.inf


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
    values, censored, exact_logs, dropped = list[float](), list[tuple[float, float]](), {}, 0
    for block in used:
        if primary.is_time:  # ratio: the other's time / this one's
            low, high = time_bounds(block_observation(ours[block]), block_observation(theirs[block]))
        else:  # ratio: this one's throughput / the other's
            low, high = throughput_bounds(block_throughput(ours[block]), block_throughput(theirs[block]))
        if low == high:
            values.append(low)
            exact_logs[block] = math.log(low)
        elif low == 0 and math.isinf(high):
            dropped += 1
        else:
            censored.append((low, high))
    return Comparison(this, other, primary, Ratio(values, censored, dropped), len(used), used, exact_logs,
                      len(censored) + dropped, left_out, smallest_effect=smallest_effect)


def declared_pairs(groups: list[Group]) -> list[tuple[Group, Group]]:
    """Fixed by the configurations, never their results: each against its baseline, then every pair, in label order."""
    configurations = sorted(averaging(groups), key=lambda g: g.label)
    return ([(g, g.baseline) for g in configurations if g.baseline]
            + [(a, b) for i, a in enumerate(configurations) for b in configurations[i + 1:]])


def family(groups: list[Group], primary: Primary, smallest_effect: float, declared: int | None = None,
           controls: Sequence[Comparison] = ()) -> list[Comparison]:
    """The declared comparisons, Holm-adjusted over a family of `declared` (the plan's) or of those here (no test:
    p = 1), and each control arm's test of ratio 1 beside them; every spread floored at the section's pooled noise
    (the model's sd of the comparisons with 2 or more exact blocks, on their degrees of freedom), which a ratio with
    fewer exact blocks borrows."""
    found = [compare(a, b, primary, smallest_effect) for a, b in declared_pairs(groups)]
    spreads = [(len(c.ratio.values) - 1, c.ratio.fitted_sd) for c in found if len(c.ratio.values) > 1]
    floor, floor_df = pooled_log_sd(spreads) or 0.0, sum(df for df, sd in spreads if sd is not None)
    for comparison in found + list(controls):
        comparison.ratio.sd_floor, comparison.ratio.floor_df = floor, floor_df
    size = max(declared or 0, len(found))
    tests = [p if p is not None else 1.0 for c in found for p in (c.ratio.p_value(), c.ratio.equivalence_p(
        smallest_effect))]  # both tests of every comparison: a claim's test is chosen by the data
    tests += [1.0] * (size - len(found)) + [p if (p := c.ratio.p_value()) is not None else 1.0 for c in controls]
    adjusted = holm(tests, [i // 2 for i in range(2 * len(found))] + list(range(len(found), size + len(controls))))
    for index, comparison in enumerate(found):
        comparison.adjusted_p, comparison.family = adjusted[2 * index + (comparison.claim == EQUIVALENT)], size
    for index, control in enumerate(controls):
        control.adjusted_p, control.family = adjusted[len(tests) - len(controls) + index], size
    return found


def control_comparison(baseline: Group, primary: Primary) -> Comparison | None:
    """The baseline against its control arm (its second run in each block): a ratio of 1 up to noise."""
    return compare(baseline, baseline.control, primary) if baseline.control else None
