"""A multirun's design, declared before its first run (kept in the sweep's plan): each section's primary figure and
comparisons, the blocks and their power, the control arms, and the jobs' order in each block (a Williams design)."""
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from metrics.report.baselines import attach_baselines, averaging, equal_resource_baselines
from metrics.report.compare import declared_pairs
from metrics.report.formats import share, times_over
from metrics.report.noise import planning_noise
from metrics.report.primary import declare
from metrics.report.runs import Run, group_runs, sections_of
from metrics.report.stats import POWER, power


def williams(n: int) -> list[list[int]]:
    """A Williams design for n treatments (first-order carry-over balance): n sequences for even n, 2n for odd n."""
    first = [0, *[t for pair in zip(range(1, n), range(n - 1, 0, -1)) for t in pair][:n - 1]]  # 0, 1, n-1, 2, ...
    square = [[(t + shift) % n for t in first] for shift in range(n)]
    return square + [row[::-1] for row in square] if n % 2 and n > 1 else square


def block_order(n: int, block: int) -> list[int]:
    """The jobs' order in this block: the design's sequence block mod its sequences."""
    sequences = williams(n)
    return sequences[block % len(sequences)]


def order_of(n: int, blocks: int, at_once: int = 1) -> dict:
    """The order's design; at_once: jobs the launcher may run at once (above 1: the order is planned, not enforced)."""
    sequences = len(williams(n))
    return {"design": "williams", "jobs": n, "sequences": sequences, "blocks": blocks,
            "balanced": blocks % sequences == 0, "at_once": at_once}


control_jobs = equal_resource_baselines  # the planned runs whose control arm every block repeats


def declaration(named: list[tuple[str, Run]], blocks: int) -> dict:
    """Per section key: its primary figure and declared comparisons (job names), for these planned runs; ValueError
    where a section's runs declare different primary figures."""
    by_id = {id(run): name for name, run in named}
    groups = group_runs([run for _, run in named])
    attach_baselines(groups)
    primary, comparisons = {}, {}
    for section in sections_of(groups):
        declared = {json.dumps(asdict(declare(r.config)), sort_keys=True) for r in section.runs}
        if len(declared) > 1:
            raise ValueError(f"the runs of {section.key} declare different primary figures: "
                             + "; ".join(sorted(declared)))
        primary[section.key] = json.loads(declared.pop())
        comparisons[section.key] = [[by_id[id(a.first)], by_id[id(b.first)]] for a, b in declared_pairs(section.groups)]
    return {"primary": primary, "comparisons": comparisons, "blocks": blocks}


def planned_blocks(named: list[tuple[str, Run]], results: Path, effect: float, cap: int,
                   repeats: int | None = None, machine: dict | None = None,
                   sweeps: Sequence[Path] = ()) -> tuple[int, list[str], dict]:
    """The plan's blocks, the lines that state their power at x/÷effect (Holm over each section's comparisons, at the
    planning noise's 95 % upper bound) and what that noise is, and the power per section. repeats=None (auto): the
    fewest blocks with POWER (at most cap); ValueError saying what to run where no noise is recorded. machine: the
    fingerprint of the machine that will run it; sweeps: earlier sweeps' candidate rows (planning_noise)."""
    groups = group_runs([run for _, run in named])
    attach_baselines(groups)
    needed, lines, powers = 2, [], {}
    for section in sections_of(groups):
        primary = declare(section.groups[0].first.config)
        configurations = averaging(section.groups)
        if not configurations:
            continue
        family = len(declared_pairs(section.groups))
        strategies = sorted({g.first.strategy for g in configurations})
        try:
            noise = planning_noise(results, primary, section.data, section.model, strategies, machine, sweeps)
            sd, df, where = noise.log_sd, noise.df, noise.where
        except ValueError:
            if repeats is None:
                raise
            lines.append(f"avgbench: the power of {repeats} blocks for {section.key} at {times_over(effect)} "
                         f"(report.smallest_effect) is unknown: {results} records no noise to compute it from")
            continue
        upper = noise.bound
        if repeats is None:
            found = next((n for n in range(2, cap + 1)
                          if (p := power(upper, n, effect, family)) is not None and p >= POWER), None)
            blocks = found or cap
            needed = max(needed, blocks)
        else:
            found, blocks = repeats, repeats
        at_upper, at_estimate = power(upper, blocks, effect, family), power(sd, blocks, effect, family)
        powers[section.key] = {"effect": effect, "blocks": blocks, "comparisons": family, "log_sd": sd, "df": df,
                               "log_sd_upper": upper, "power": at_upper, "power_at_estimate": at_estimate,
                               "noise": noise.basis}
        head = f"avgbench: {'repeats=auto: ' if repeats is None else ''}{blocks} blocks for {section.key}"
        reach = (f"{share(at_upper)} power to detect a ratio beyond {times_over(effect)} (report.smallest_effect)"
                 + ("" if found else f", capped at report.max_blocks={cap}: {times_over(effect)} needs more")
                 + (f" at the prior (log-sd {upper:.3f})" if upper == sd else
                    f" at that noise's 95 % upper bound (log-sd {upper:.3f}; {share(at_estimate)} at its estimate "
                    f"{sd:.3f}, {df} degrees of freedom)"))
        lines.append(f"{head}: {reach}, after Holm over {family} comparisons, planned on {where}; fixed "
                     "now, no optional stopping")
    return needed, lines, powers

