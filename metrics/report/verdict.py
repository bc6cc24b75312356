"""The verdict at the top of each (dataset, model) section, on the primary figure alone: the answer, the method in one
sentence, each configuration's findings and caveats, the control arm, and the noise."""
import math
import re
import statistics
from dataclasses import dataclass, field

from metrics.report.baselines import averaging, missing_baselines, override_command
from metrics.report.compare import Comparison, control_comparison, family
from metrics.report.links import network_lines
from metrics.report.model import Caveat, Entry, Verdict
from metrics.report.primary import THROUGHPUT, Primary, declare, from_dict, time_observation
from metrics.report.runs import Group, Run, Section, off_plan, plan_refusal, shared_seeds
from metrics.report.formats import counted, cpus, interval_text, number, share, size, times_over
from metrics.report.tables import (bottleneck, error_headline, failure_counters, mlperf_time, ranked, reached_cell,
                                   reached_count)
from metrics.report.stats import (ALPHA, BASIS, CANNOT_TELL, EQUIVALENCE_LEVEL, EQUIVALENT, FASTER, NO_INTERVAL, POWER,
                                  SLOWER, WITHHELD, detectable, excludes_one, pooled_log_sd, upper_log_sd)

DEFAULT_SMALLEST_EFFECT = 1.25  # report.smallest_effect of runs that predate it

REFERENCES_NOTE = ("Reference runs, not ranked: one process on fewer CPUs than any compared configuration (the "
                   "scaling-efficiency baselines).")
SEVERAL_SECTIONS = ("These runs cover {count} (dataset / model) combinations: {combos}. Accuracy, time-to-target and "
                    "throughput depend on the dataset and the model, so runs are ranked only within each combination "
                    "(one ranking each), never against each other.")
COMMANDS_NOTE = ("Baselines missing from this comparison: these commands produce them (add hydra.run.dir=... as "
                 "you like), then rebuild the report over the old and the new run directories with "
                 "`python -m metrics.report DIR [DIR ...] -o OUT`.")


@dataclass
class Analysis:
    """What a section's verdict rests on."""
    section: Section
    primary: Primary
    margin: float             # the equivalence margin: the declared smallest effect of interest, a ratio x/÷
    ranking: list[Group]      # the compared configurations and their baselines, ranked on the primary figure
    references: list[Group]   # one process on fewer CPUs: scaling-efficiency baselines, not ranked
    comparisons: list[Comparison]  # the declared family
    controls: list[Comparison]     # each baseline against its control arm
    refusals: list[str] = field(default_factory=list)  # why no verdict may be given
    notes: list[str] = field(default_factory=list)     # about the plan: order, first runs without a declaration


def smallest_effect_of(section: Section) -> float:
    """The equivalence margin: the plan's declared smallest effect, else the first run's report.smallest_effect."""
    declared = [d["smallest_effect"] for p in section.plans().values()
                if "smallest_effect" in (d := p.get("declaration") or {})]
    configured = (section.groups[0].first.config.get("report") or {}).get("smallest_effect", DEFAULT_SMALLEST_EFFECT)
    return declared[0] if declared else configured


def is_reference(group: Group, groups: list[Group]) -> bool:
    """A single-process group on fewer CPUs than every configuration that averages: shown, not ranked."""
    compared = [g.first.total_cpus for g in averaging(groups)]
    return group.first.is_baseline and bool(compared) and group.first.total_cpus < min(compared)


def key_of(primary: Primary) -> tuple:
    return primary.figure, primary.metric, primary.value, primary.estimator


def primary_of(section: Section) -> tuple[Primary, list[str], list[str], int]:
    """The section's primary figure (the plans', else the runs' config), why no verdict may rest on it, notes on the
    plan, and the size of the declared comparison family (0: none declared)."""
    notes, declared, family_size = [], [], 0
    plans = section.plans()
    apart = plan_refusal(plans)  # sweeps of different plans; else blocks of one plan that repeat a seed
    refusals = off_plan(section) + ([apart] if apart else shared_seeds(section.groups))
    for sweep, plan in plans.items():
        declaration = plan.get("declaration")
        if not declaration:  # refused by off_plan: no declared blocks
            continue
        if plan.get("changed"):
            refusals.append(f"the plan of {sweep} changed after its first runs ({plan['changed']})")
        if section.key in (declaration.get("primary") or {}):
            declared.append(from_dict(declaration["primary"][section.key]))
        family_size = max(family_size, len((declaration.get("comparisons") or {}).get(section.key) or []))
        notes += order_notes(declaration.get("order")) + basis_notes(sweep, (declaration.get("power") or {}).get(
            section.key))
        if plan.get("first_runs_undeclared"):
            notes.append(f"The first runs of {sweep} predate declared plans: its design was declared when it resumed.")
    configured = []
    for run in section.runs:
        try:
            configured.append(declare(run.config))
        except ValueError as exc:
            refusals.append(str(exc))
    by_key = {key_of(p): p for p in declared or configured}
    if len(by_key) > 1:
        refusals.append("the runs declare different primary figures: " + "; ".join(p.text for p in by_key.values()))
    primary = next(iter(by_key.values()), None) or Primary(THROUGHPUT)
    made_under = {key_of(p) for p in configured}
    if declared and made_under - {key_of(primary)}:
        refusals.append(f"runs were made under another primary figure than the plan declares ({primary.text})")
    return primary, list(dict.fromkeys(refusals)), notes, family_size


def basis_notes(sweep: str, power: dict | None) -> list[str]:
    """What a plan's blocks were planned on (design.planned_blocks: its own machine's noise or a prior), and their
    power; none for plans that predate saying it."""
    if not power or power.get("noise") not in BASIS:
        return []
    return [f"Planned on {BASIS[power['noise']]}: the plan of {sweep} chose {power['blocks']} blocks at log-sd "
            f"{power['log_sd']:.3f} (95 % upper bound {power['log_sd_upper']:.3f}), {share(power['power'])} power at "
            f"{times_over(power['effect'])}."]


def order_notes(order: dict | None) -> list[str]:
    if not order:
        return []
    balanced = (f"{order['blocks']} blocks complete a balanced set" if order["balanced"] else
                f"{order['blocks']} blocks do not complete a balanced set (a multiple of {order['sequences']} "
                "blocks would): the order's carry-over is not balanced")
    enforced = ("" if (order.get("at_once") or 1) == 1 else
                f" The order was not enforced: the launcher ran up to {order['at_once']} jobs at once (SLURM: "
                "hydra.launcher.array_parallelism), so runs of a block may have run side by side, on other nodes.")
    return [f"Order: a Williams design over the {order['jobs']} jobs of a block ({order['sequences']} sequences, "
            f"each job once in every position and after every other job once per set); {balanced}.{enforced}"]


def analyse(section: Section) -> Analysis:
    primary, refusals, notes, declared = primary_of(section)
    margin = smallest_effect_of(section)
    contenders = [g for g in section.groups if not g.is_control]
    references = [g for g in contenders if is_reference(g, section.groups)]
    ranking = ranked([g for g in contenders if g not in references], primary)
    controls = [c for c in (control_comparison(g, primary) for g in ranking) if c]
    comparisons = family(ranking, primary, margin, declared, controls)
    for comparison in comparisons:
        comparison.withheld = bool(refusals or unsteady(controls))
    return Analysis(section, primary, margin, ranking, ranked(references, primary), comparisons, controls,
                    refusals, notes)


def unsteady(controls: list[Comparison]) -> list[Comparison]:
    """The control arms whose test of ratio 1 Holm's correction rejects (they are in the section's family): their
    blocks are not comparable, no claim stands."""
    return [c for c in controls if c.adjusted_p is not None and c.adjusted_p < ALPHA]


def claim_text(c: Comparison) -> str:
    """What the comparison allows saying of c.this against c.other, with the ratio it rests on."""
    measured = interval_text(c.ratio)
    decision = c.decision
    if not c.blocks:
        return "no block holds a faithful run of both: no paired ratio"
    if c.ratio.dropped == c.blocks:
        return ("no block tells them apart (both missed, or both crossed at the first evaluation, in every block)"
                if c.primary.is_time else "both failed in every block") + ": no ratio"
    if decision == NO_INTERVAL:
        return f"{measured}: no result"
    if decision == EQUIVALENT:
        low, high = c.ratio.interval(EQUIVALENCE_LEVEL) or (0.0, 0.0)
        return (f"no faster (equivalent within {times_over(c.smallest_effect)}, TOST; "
                f"{EQUIVALENCE_LEVEL * 100:.0f} % interval [{low:.2f}, {high:.2f}]): {measured}")
    return {FASTER: f"faster: {measured}{within_margin(c)}", SLOWER: f"slower: {measured}{within_margin(c)}",
            WITHHELD: f"withheld (no verdict): {measured}",
            CANNOT_TELL: f"cannot tell: {measured}" + why_no_claim(c)}[decision]


def within_margin(c: Comparison) -> str:
    """What a claimed difference's 95 % interval says where it lies inside the equivalence margin."""
    low, high = c.ratio.interval() or (0.0, math.inf)
    inside = 1 / c.smallest_effect < low and high < c.smallest_effect
    return f", within the {times_over(c.smallest_effect)} of no practical interest" if inside else ""


def why_no_claim(c: Comparison) -> str:
    """Why a comparison makes no claim: Holm's correction, where its own test would have passed."""
    if c.p is None or c.p >= ALPHA:
        return ""
    return (f" ({c.test} p = {c.p:.3f} before Holm's correction for {c.family} comparisons, {c.adjusted_p:.2f} "
            "after)")


def against_baseline(group: Group, comparisons: list[Comparison]) -> Comparison | None:
    return next((c for c in comparisons if c.this is group and c.other is group.baseline), None)


def reached_text(group: Group, primary: Primary) -> str:
    return f"reached {primary.target} in {reached_cell(group)}"


def finding_of(group: Group, a: Analysis) -> str:
    """One configuration's line under the answer: how often it reached the target, its claim against its baseline."""
    head = f"{group.label}: " + (reached_text(group, a.primary) + "; " if a.primary.is_time else "")
    if group.baseline is group:
        return head + f"the equal-resource baseline (one process on {cpus(group.first.total_cpus)})"
    comparison = against_baseline(group, a.comparisons)
    if comparison is None:
        return head + f"no run of one process on {cpus(group.first.total_cpus)} to compare it with (command below)"
    return head + f"against {comparison.other.label}: {claim_text(comparison)}"


def answer_of(a: Analysis) -> str:
    if a.refusals:
        return "No verdict: " + "; ".join(a.refusals) + "."
    noisy = unsteady(a.controls)
    if noisy:
        return ("No claim: the blocks are not comparable. The control arm (the same one-process run twice in every "
                "block) differs from itself: "
                + "; ".join(f"{c.this.label} against its second run: {interval_text(c.ratio)}" for c in noisy)
                + ", a ratio of 1 rejected after Holm's correction; no ratio below is a finding.")
    configurations = averaging(a.ranking)
    if not configurations:
        return "No averaging configuration among these runs: nothing to set against one process."
    claims = {g: c for g in configurations if (c := against_baseline(g, a.comparisons))}
    faster = [g for g, c in claims.items() if c.decision == FASTER]
    what = f"{a.primary.name}" + (f" to {a.primary.target}" if a.primary.is_time else "")
    if faster:
        sentence = "Answer: " + "; ".join(
            f"{g.label} is faster than one process on the same {cpus(g.first.total_cpus)} in {what}: "
            f"{interval_text(claims[g].ratio)}{within_margin(claims[g])}" for g in faster) + "."
        between = [c for c in a.comparisons if c.this in faster and c.other in faster]
        sentence += "".join(f" {c.this.label} against {c.other.label}: {claim_text(c)}." for c in between)
    else:
        sentence = (f"Answer: no averaging configuration is shown faster than one process on the same CPUs in "
                    f"{what}.")
        slower = [g for g, c in claims.items() if c.decision == SLOWER]
        if slower and len(slower) == len(configurations):
            sentence += " Every one is slower: here, one process with the same CPUs beats them all."
    return sentence


def method_of(a: Analysis) -> str:
    counted = ("a run that missed the target (or failed) is censored at its horizon" if a.primary.is_time else
               "a failed run is censored at the other's throughput (at best a tie)")
    return (f"Method: each configuration is compared with the runs of the same block; ratio, 95 % interval and test "
            f"come from one censored log-normal model of the paired log ratios (all blocks exact: the paired "
            f"Student-t); {counted}, as evidence, not a veto; a claim (faster or slower where the 95 % interval "
            f"excludes 1, else equivalent within {times_over(a.margin)}, by a TOST) needs p < 0.05 after Holm's "
            f"correction over the {a.comparisons[0].family if a.comparisons else 0} comparisons declared for this "
            "section and the control arm's test (details: Methods).")


def control_line(a: Analysis) -> str:
    if not a.controls:
        return ("Control arm: none in these runs (a multirun runs the equal-resource baseline twice in every block): "
                "the noise floor between two runs of one configuration in one block is not measured.")
    parts = []
    for c in a.controls:
        verdict = ("differs from 1 after Holm's correction: runs in one block are not comparable" if unsteady([c])
                   else "no interval" if c.ratio.interval() is None else
                   f"excludes 1 before Holm's correction only (adjusted p {c.adjusted_p:.2f})" if excludes_one(c.ratio)
                   else "includes 1")
        parts.append(f"{c.this.label} against its second run: {interval_text(c.ratio)}, {verdict}")
    return ("Control arm (the equal-resource baseline run twice in every block, the noise floor; > 1: the first run "
            "was the faster): " + "; ".join(parts) + ".")


@dataclass
class Noise:
    """The primary figure's own noise and what a next plan of as many blocks detects with it (METHODS["noise"])."""
    log_sd: float | None  # pooled sd of the log ratios; None: not measured (one block, or no spread)
    df: int               # its degrees of freedom
    blocks: int
    family: int           # the declared comparisons, Holm's family
    detectable: float | None  # the smallest ratio x/÷ that many blocks detect at 80 % power after Holm


def noise_of(a: Analysis) -> Noise | None:
    """Over the comparisons with the baselines and the control arms, blocks observed exactly; None without any."""
    measured = [c.ratio.uncensored for c in a.comparisons if c.other is c.this.baseline] + \
        [c.ratio.uncensored for c in a.controls]
    if not measured:
        return None
    blocks = max(r.n for r in measured)
    spreads = [(r.n - 1, r.log_sd) for r in measured if r.n > 1]
    spread = pooled_log_sd(spreads) or None
    family = max(1, a.comparisons[0].family if a.comparisons else 1)
    return Noise(spread, sum(df for df, sd in spreads if sd is not None), blocks, family,
                 detectable(spread, blocks, family) if spread else None)


def noise_line(a: Analysis) -> str | None:
    """The primary figure's own noise."""
    if not (noise := noise_of(a)):
        return None
    if not noise.log_sd or noise.detectable is None:
        return (f"Noise of {a.primary.name}: not measured (one block, or no spread): no ratio here has an "
                "interval; run the multirun with repeats=2 or more (the default is 3).")
    return (f"Noise of {a.primary.name}: the paired ratios vary by {noise.log_sd:.1%} (sd of their logs, pooled over "
            f"the comparisons with the baselines and the control arm, blocks observed exactly).")


def next_plan_line(a: Analysis) -> str | None:
    """The smallest ratio a next plan of this sweep's blocks detects on the noise it measured (not a post-hoc power),
    and the bound repeats=auto plans that machine's next sweep on (noise.write_sweep_noise)."""
    if not (noise := noise_of(a)) or not noise.log_sd or noise.detectable is None:
        return None
    return (f"Next plan: on the noise this sweep measured (log-sd {noise.log_sd:.3f} on {noise.df} degrees of "
            f"freedom), {noise.blocks} blocks detect a ratio beyond {times_over(noise.detectable)} at {share(POWER)} "
            f"power, two-sided {share(ALPHA)} after Holm over {noise.family} declared comparisons; repeats=auto on "
            f"this machine plans on its 95 % upper bound, log-sd {upper_log_sd(noise.log_sd, noise.df):.3f}.")


def left_out_runs(a: Analysis) -> list[str]:
    """One line per unfaithful run whose block a comparison left out, with the figure that failed."""
    found = {run for c in [*a.comparisons, *a.controls] for run in c.left_out}
    return [str(run) for run in sorted(found, key=lambda r: (str(r.block), r.label))]


# Each configuration's entry: the primary figure first, every other figure beside it.




def scaling_text(group: Group) -> str:
    peers, per_peer = group.first.shape
    if group.one_peer is None:
        return (f"scaling efficiency n/a: no 1×{per_peer} run (single, 1 peer of {cpus(per_peer)}; "
                "command below)")
    return f"scaling efficiency {interval_text(group.efficiency, '')} (vs {peers} × {group.one_peer.label})"


def figures_of(group: Group, a: Analysis) -> list[str]:
    figures = []
    if a.primary.is_time:
        reached = [t for t in group.values(lambda r: r.summary.time_to_target_s)]
        figures.append(reached_text(group, a.primary))
        if reached:
            figures.append(f"ranked on MLPerf-style time-to-target {number(mlperf_time(group))} s (olympic mean "
                           f"over blocks, a miss the slowest; mean of the {len(reached)} that reached it "
                           f"{number(statistics.fmean(reached))} s)")
    if group.baseline is group:
        figures.append(f"is the equal-resource baseline ({cpus(group.first.total_cpus)})")
    elif group.baseline is None:
        figures.append(f"no equal-resource baseline (a single run with {cpus(group.first.total_cpus)}; command "
                       "below)")
    figures += [f"{a.primary.name} against {c.other.label}: {claim_text(c)}" for c in a.comparisons if c.this is group]
    throughput = group.mean(lambda r: r.summary.throughput_samples_per_s)
    if throughput is not None:
        figures.append(f"{number(throughput)} samples/s")
        if group.baseline and group.baseline is not group:
            figures.append(f"throughput speedup {interval_text(group.speedup)} vs {group.baseline.label}"
                           + (" (beside the primary figure)" if a.primary.is_time else ""))
        if group.one_peer is not group:
            figures.append(scaling_text(group))
    sent = group.mean(lambda r: r.summary.bytes_sent_per_sample)
    if sent is not None:
        figures.append(f"{size(sent)}/sample sent" if sent else "no payload exchanged")
    worst = group.mean(lambda r: r.worst_worker_accuracy())
    if a.primary.is_time and worst is not None:
        figures.append(f"worst worker {worst:.3f}")
    found = bottleneck(group)
    if found:
        figures.append(f"{found[0]}-bound ({share(found[1])} of the step)")
    if len(group.runs) > 1:
        figures.append(f"mean of {len(group.runs)} repeats")
    return figures


# Caveats: (kind, detail) pairs. The kind is one line with its count ({runs}, {reruns} or {configurations}), the
# detail one run's (or one configuration's); count_caveats() turns them into one Caveat per kind.
COUNTED = ("run", "rerun", "configuration")
FAILED = "{runs} failed"
RUN_AGAIN = "{reruns} not counted (a block's first attempt counts)"
MISSED = "{runs} missed the target"
LOST_PEERS = "{runs} lost peers"
FAILED_ROUNDS = "{runs} with failed averaging rounds"
OVERSUBSCRIBED = "{runs} oversubscribed"
NOT_ISOLATED = "{runs} not isolated"
UNFAITHFUL = {"isolation": "{runs} on a contended CPU left out", "link": "{runs} on a link under its rate left out",
              "dilation": "{runs} dilated beyond the checked factor left out"}  # by the figure that failed
DILATED = "{runs} dilated"
NOT_ALONE = "{runs} not alone on the machine"
SPEED_MOVED = "{runs} on a machine whose speed moved (marked, not left out)"
SPEED_OFF_BLOCK = "{runs} on a machine slower or faster than its block's (marked, not left out)"
SHARED_GPUS = "{runs} with peers sharing GPUs"
SYNTHETIC = "{runs} on synthetic data: throughput only"
SHORT_WINDOW = "{runs} ended inside the measurement window"
UNEQUAL_LENGTH = "{configurations} of unequal length"


def caveats_of(group: Group, section: Section) -> list[tuple[str, str]]:
    """(kind, detail) of every caveat of the group's runs and attempts, the detail naming block and configuration."""
    def where(run: Run) -> str:
        block = run.config.get("block")
        return group.label if block is None else f"block {block}, {group.label}"

    items = [(kind, f"{where(run)}: {detail}") for run in group.runs for kind, detail in run_caveats(run, section)]
    items += [(RUN_AGAIN, f"{where(run)}: " + ", ".join(filter(None, [
        run.summary.status, f"reached the target at {number(run.summary.time_to_target_s)} s"
        if run.completed and run.summary.time_to_target_s is not None else None, error_headline(run.summary.error)])))
        for run in group.attempts]
    length = length_caveat(group, section.groups)
    return items + ([(UNEQUAL_LENGTH, f"{group.label}: {length}")] if length else [])


def run_caveats(run: Run, section: Section) -> list[tuple[str, str]]:
    found = []
    if not run.completed:
        found.append((FAILED, f"{run.summary.status or 'unknown status'} (seed {run.config.get('seed')}): "
                              f"{error_headline(run.summary.error) or 'no error recorded'}"))
    if not section.synthetic and not time_observation(run).reached:
        found.append((MISSED, "target not reached"))
    if run.summary.lost_peers:
        found.append((LOST_PEERS, "lost peers " + ", ".join(map(str, run.summary.lost_peers))))
    failed_rounds = {k: v for k, v in failure_counters(run).items() if isinstance(v, (int, float)) and v > 0}
    if failed_rounds:
        found.append((FAILED_ROUNDS, ", ".join(f"{k}={number(v)}" for k, v in failed_rounds.items())))
    found += setting_caveats(run) + speed_caveats(run, section.runs)
    if run.summary.device.gpu_shared:
        found.append((SHARED_GPUS, "more peers than GPUs on a host: not one GPU per peer"))
    if section.synthetic or run.summary.data_is_synthetic:
        found.append((SYNTHETIC, "synthetic data: accuracy has no meaning"))
    if short := short_window(run):
        found.append((SHORT_WINDOW, short))
    return found


def short_window(run: Run) -> str | None:
    """A run measured over fewer steps than the declared measurement window (it ended inside or before it)."""
    if (window := run.summary.window) and not window.complete:
        return (f"ended before the end of the measurement window (steps {window.first}-{window.last}): its per-step "
                "figures cover fewer steps")
    return None


def setting_caveats(run: Run) -> list[tuple[str, str]]:
    """What limits the run's fidelity to its setting: summary.json's shape, isolation and machine."""
    found = []
    shape = run.summary.shape
    if shape and (shape.fits is False or (shape.oversubscription or 0) > 1):
        found.append((OVERSUBSCRIBED, f"by {number(shape.oversubscription)}×, on {shape.cores} cores"))
    elif not shape and (shared := shared_cores(run)):
        found.append((OVERSUBSCRIBED, shared))
    isolation = run.summary.isolation
    if isolation and isolation.status == "not isolated":
        found.append((NOT_ISOLATED, isolation.reason or "not isolated"))
    found += [(UNFAITHFUL[why.split(":")[0]], why) for why in run.unfaithful()]
    if isolation and isolation.dilation not in (None, 1, 1.0):
        found.append((DILATED, f"dilated by {number(isolation.dilation)}"))
    machine = run.summary.machine
    if machine and machine.alone is False:
        found.append((NOT_ALONE, f"other processes: up to {share(machine.other_cpu_share)} of its CPU"
                      if machine.other_cpu_share else "other processes ran"))
    return found


def speed_caveats(run: Run, section_runs: list[Run]) -> list[tuple[str, str]]:
    """Where the run's speed reference moved beyond its tolerance, or strayed by more from its block's median (marks
    only: no run is left out for them)."""
    found = [(SPEED_MOVED, moved)] if (moved := run.speed_moved()) else []
    off = run.slower_than_block(section_runs)
    if off is not None and (tolerance := run.speed_reference.tolerance) is not None and abs(off) > tolerance:
        found.append((SPEED_OFF_BLOCK, f"this run's machine was {share(abs(off))} "
                                       f"{'slower' if off > 0 else 'faster'} than its block's median (speed reference, "
                                       "median over the block's runs of the same work)"))
    return found


def count_caveats(items: list[tuple[str, str]]) -> list[Caveat]:
    """One Caveat per kind, in order of first appearance: its line with the count, its details."""
    kinds: dict[str, list[str]] = {}
    for kind, detail in items:
        kinds.setdefault(kind, []).append(detail)
    return [Caveat(kind.format(**{unit + "s": counted(len(details), unit) for unit in COUNTED}),
                   "caveat-" + re.sub(r"[^a-z]+", "-", re.sub(r"\{\w+\}", "", kind).lower()).strip("-"),
                   list(dict.fromkeys(details)))
            for kind, details in kinds.items()]


def shared_cores(run: Run) -> str | None:
    """Processes that asked for more CPUs than the cores they were pinned to (peers.result.cores)."""
    pinned = [(p.result or {}).get("cores") or [] for p in run.summary.peers or []]
    per_process = run.config["peer_cpus"] * (run.config["peers"] if run.is_baseline else 1)  # single: N x c threads
    asked = per_process * len(pinned)
    distinct = len({c for cores in pinned for c in cores})
    if not distinct or distinct >= asked:
        return None
    return f"{asked} CPUs asked, {distinct} cores on this host, so processes shared cores"


def length_caveat(group: Group, groups: list[Group]) -> str | None:
    """Runs of unequal length: other max_steps, or fewer samples than the longest configuration (unless every run
    stopped at its confirmed crossing)."""
    parts = []
    steps = sorted({g.first.config["max_steps"] for g in groups})
    if len(steps) > 1:
        parts.append(f"max_steps={group.first.config['max_steps']} (this comparison: "
                     f"{', '.join(map(str, steps))})")
    samples = group.mean(lambda r: r.summary.total_samples) or 0
    most = max(g.mean(lambda r: r.summary.total_samples) or 0 for g in groups)
    stopped = all(r.summary.evaluation.stopped_at_target for r in group.runs)
    if samples < most and not stopped:
        parts.append(f"{samples:,.0f} samples trained, {most:,.0f} in the longest configuration")
    return "; ".join(parts) if parts else None


def section_verdict(section: Section) -> tuple[Verdict, Analysis]:
    a = analyse(section)
    lines = [control_line(a), noise_line(a), next_plan_line(a), *a.notes]
    configurations = averaging(a.ranking) + [g for g in a.ranking if g.first.is_baseline]
    caveats = {id(g): caveats_of(g, section) for g in section.groups}
    every = count_caveats([c for g in section.groups for c in caveats[id(g)]])

    def entry(g: Group) -> Entry:
        return Entry(g.label, figures_of(g, a), count_caveats(caveats[id(g)]))

    verdict = Verdict(f"Primary figure (declared before the first run): {a.primary.text}.", answer_of(a),
                      method_of(a), [finding_of(g, a) for g in configurations], network_lines(a.ranking + a.references),
                      [line for line in lines if line], every,
                      [entry(g) for g in a.ranking], [entry(g) for g in a.references],
                      [override_command(o) for o in missing_baselines(section.runs)], REFERENCES_NOTE, COMMANDS_NOTE)
    return verdict, a


def intro(sections: list[Section]) -> list[str]:
    if len(sections) < 2:
        return []
    combos = "; ".join(f"{s.data} / {s.model}" for s in sections)
    return [SEVERAL_SECTIONS.format(count=len(sections), combos=combos)]
