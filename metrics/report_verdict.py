"""The verdict at the top of the report: per (dataset, model) section, the configurations ranked by time-to-target
(then throughput), one sentence each (speedup, scaling efficiency, bytes per sample, worst worker, bottleneck) with
the caveats that concern it, and the commands that would produce the baselines the comparison lacks."""
import html
import statistics
from dataclasses import dataclass

from metrics.report_data import (Group, Run, Section, completed_throughput, completed_time_to_target,
                                 missing_baselines, override_command, paired)
from metrics.report_tables import bottleneck, cpus, error_headline, failure_counters, interval_text, number, ranked
from metrics.stats import ALPHA, CANNOT_TELL, EQUIVALENT, FASTER, NO_INTERVAL, SLOWER, Ratio, decide, detectable, holm, \
    pooled_log_sd

DEFAULT_MARGIN = 0.05  # report.equivalence_margin of runs that predate it

METHOD = ("Ranked by mean time-to-target (summary.json's time_to_target_s; configurations reaching the target in "
          "every repeat first), then by mean global throughput (all workers' samples / the longest worker's training "
          "time, samples/s); on synthetic data by throughput only. The order alone is no finding. Ratios are paired: a "
          "multirun runs every configuration and its baselines once per block (`repeats` blocks, shuffled within "
          "each), and each configuration is compared with the baseline run in the same block. Speedup: throughput / "
          "that of the equal-resource baseline, the `single` run on the same data, model and batch per peer with as "
          "many CPUs in total (peers × CPUs per peer); time-to-target speedup: the baseline's time-to-target / the "
          "configuration's, in blocks where both reached the target. Scaling efficiency: throughput / (peers × "
          "throughput of the `single` run with 1 peer of the same CPUs). Each ratio: geometric mean over blocks and "
          "95 % interval [low, high] from a Student-t interval on the log ratios (Hoefler and Belli, SC15); with one "
          "block no interval can be computed and the ratio is no result. A configuration is called faster or slower "
          "than another only when its interval excludes 1 after Holm's correction for the comparisons of its section "
          "(adjusted p < 0.05); equivalent (\"no faster than\") only from a TOST equivalence test within the stated "
          "margin; otherwise \"cannot tell at this noise level (±x %)\", x = the interval's half width. The ranking "
          "figure (time-to-target where the configuration and its baseline reached the target in every paired block, "
          "else throughput) decides. Bytes per sample: payload bytes a worker sent per sample it trained "
          "(bytes_sent_per_sample; KiB = 1024 bytes). Worst worker: the lowest final test accuracy over workers "
          "(fraction of the held-out split). Bottleneck: the largest share of the mean step (time_breakdown_share): "
          "data, compute (forward, backward, optimizer update) or communication. Other figures: means over repeats.")
SEVERAL_SECTIONS = ("These runs cover {count} (dataset / model) combinations: {combos}. Accuracy, time-to-target and "
                    "throughput depend on the dataset and the model, so runs are ranked only within each combination "
                    "(one ranking each), never against each other.")


@dataclass
class Entry:
    label: str
    figures: list[str]
    caveats: list[str]


@dataclass
class Verdict:
    """The ranking of one section."""
    title: str
    answer: str | None   # the best averaging configuration against one process on the same CPUs, with caveats
    noise: str | None    # blocks, measured noise and the smallest difference they can detect
    entries: list[Entry]
    references: list[Entry]  # single-process runs on fewer CPUs, kept for scaling efficiency, not ranked
    commands: list[str]  # train.py commands producing the missing baselines


@dataclass
class Comparison:
    """A claim the verdict may make: ratio > 1 means `group` is faster than `other` (paired by block)."""
    group: Group
    other: Group
    figure: str  # what the ratio compares: "time-to-target" or "throughput"
    ratio: Ratio
    adjusted_p: float | None = None  # Holm-adjusted over the section's comparisons
    family: int = 1  # how many comparisons the section's Holm correction counts

    def claim(self, other_name: str, margin: float) -> str:
        """What may be said of group against other_name, with the ratio it rests on."""
        ratio = self.ratio
        measured = f"{self.figure} speedup {interval_text(ratio)}"
        decision = decide(ratio, self.adjusted_p, margin) if ratio.n else None
        if decision is None:
            return f"no run of {other_name} in the same block: no paired ratio"
        if decision == NO_INTERVAL:
            return (f"its {self.figure} speedup over {other_name} is {ratio.estimate:.2f}× in one block: the interval "
                    "cannot be computed (repeats=1), so this is no result")
        return {FASTER: f"it is faster than {other_name}: {measured}",
                SLOWER: f"it is slower than {other_name}: {measured}",
                EQUIVALENT: f"it is no faster than {other_name} (equivalent within ±{margin:.0%}, TOST): {measured}",
                CANNOT_TELL: f"cannot tell it from {other_name} at this noise level (±{ratio.noise:.0%}): {measured}"
                             + self.holm_note(),
                }[decision]

    def holm_note(self) -> str:
        """Why an interval that excludes 1 is no claim: Holm's correction for the section's comparisons."""
        if self.ratio.p_value() >= ALPHA:
            return ""
        return (f" (it excludes 1 only before Holm's correction for {self.family} comparisons: adjusted p = "
                f"{self.adjusted_p:.2f})")


REFERENCES_NOTE = ("Reference runs, not ranked: one process on fewer CPUs than any compared configuration (the "
                   "scaling-efficiency baselines).")


def mean(group: Group, figure) -> float | None:
    values = group.values(figure)
    return statistics.fmean(values) if values else None


def summary_mean(group: Group, key: str) -> float | None:
    return mean(group, lambda r: r.summary.get(key))


def size(n_bytes: float) -> str:
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= scale:
            return f"{number(n_bytes / scale)} {unit}"
    return f"{number(n_bytes)} bytes"


def target_text(group: Group) -> str:
    target = group.first.summary.get("target") or {}
    relation = "≥" if target.get("metric") == "test_accuracy" else "≤"
    return f"{target.get('metric')} {relation} {target.get('value')}"


def compare(group: Group, other: Group, synthetic: bool) -> Comparison:
    """group against other on the ranking figure: time-to-target where both reached the target in every block
    they share, else throughput."""
    throughput = paired(group, other, completed_throughput)
    ttt = paired(other, group, completed_time_to_target)
    if not synthetic and ttt.n and ttt.n == throughput.n:
        return Comparison(group, other, "time-to-target", ttt)
    return Comparison(group, other, "throughput", throughput)


def comparisons_of(ranking: list[Group], synthetic: bool) -> list[Comparison]:
    """The section's claims: every averaging configuration against its equal-resource baseline, and the first
    averaging configuration against the second; p-values Holm-adjusted over all of them."""
    averaging = [g for g in ranking if not g.first.is_baseline]
    found = [compare(g, g.baseline, synthetic) for g in averaging if g.baseline]
    if len(averaging) > 1:
        found.append(compare(averaging[0], averaging[1], synthetic))
    adjusted = holm([c.ratio.p_value() for c in found])
    for comparison, p in zip(found, adjusted):
        comparison.adjusted_p, comparison.family = p, sum(q is not None for q in adjusted)
    return found


def against_baseline(group: Group, comparisons: list[Comparison]) -> Comparison | None:
    return next((c for c in comparisons if c.group is group and c.other is group.baseline), None)


def speedup_text(group: Group, comparisons: list[Comparison], margin: float) -> str:
    total = cpus(group.first.total_cpus)
    if group.baseline is group:
        return f"is the equal-resource baseline ({total})"
    if group.baseline is None:
        return f"speedup n/a: no equal-resource baseline (a single run with {total}; command below)"
    text = f"speedup {interval_text(group.speedup)} vs {group.baseline.label} (the equal-resource baseline, {total})"
    comparison = against_baseline(group, comparisons)
    return text + (f"; {comparison.claim(group.baseline.label, margin)}" if comparison else "")


def scaling_text(group: Group) -> str:
    peers, per_peer = group.first.shape
    if group.one_peer is None:
        return (f"scaling efficiency n/a: no 1×{per_peer} run (single, 1 peer of {cpus(per_peer)}; "
                "command below)")
    return f"scaling efficiency {interval_text(group.efficiency, '')} (vs {peers} × {group.one_peer.label})"


def figures_of(group: Group, synthetic: bool, comparisons: list[Comparison], margin: float) -> list[str]:
    figures = []
    reached = group.values(lambda r: r.summary.get("time_to_target_s"))
    if not synthetic and len(reached) == len(group.runs):
        figures.append(f"reached {target_text(group)} in {number(statistics.fmean(reached))} s")
    throughput = summary_mean(group, "throughput_samples_per_s")
    if throughput is not None:
        figures.append(f"{number(throughput)} samples/s")
        figures += [speedup_text(group, comparisons, margin), scaling_text(group)]
    sent = summary_mean(group, "bytes_sent_per_sample")
    if sent is not None:
        figures.append(f"{size(sent)}/sample sent" if sent else "no payload exchanged")
    worst = mean(group, lambda r: r.worst_worker_accuracy())
    if not synthetic and worst is not None:
        figures.append(f"worst worker {worst:.3f}")
    found = bottleneck(group)
    if found:
        figures.append(f"{found[0]}-bound ({100 * found[1]:.0f}% of the step)")
    if len(group.runs) > 1:
        figures.append(f"mean of {len(group.runs)} repeats")
    return figures


def caveats_of(group: Group, section: Section) -> list[str]:
    caveats = []
    for run in group.runs:
        if not run.completed:
            caveats.append(f"{run.summary.get('status', 'unknown status')} (seed {run.config.get('seed')}): "
                           f"{error_headline(run.summary.get('error')) or 'no error recorded'}")
    reached = group.values(lambda r: r.summary.get("time_to_target_s"))
    if not section.synthetic and len(reached) < len(group.runs):
        some = f" in {len(group.runs) - len(reached)} of {len(group.runs)} repeats" if reached else ""
        caveats.append(f"target ({target_text(group)}) not reached{some}")
    lost = sorted({rank for r in group.runs for rank in r.summary.get("lost_peers") or []})
    if lost:
        caveats.append(f"lost peers {', '.join(map(str, lost))}")
    failed_rounds = {k: v for r in group.runs for k, v in failure_counters(r).items()
                     if isinstance(v, (int, float)) and v > 0}
    if failed_rounds:
        caveats.append("failed averaging rounds: " + ", ".join(f"{k}={number(v)}" for k, v in failed_rounds.items()))
    caveats += setting_caveats(group.runs)
    if any((r.summary.get("device") or {}).get("gpu_shared") for r in group.runs):
        caveats.append("peers shared GPUs (more peers than GPUs on a host): not one GPU per peer")
    if section.synthetic or any(r.summary.get("data_is_synthetic") for r in group.runs):
        caveats.append("synthetic data: throughput only, accuracy has no meaning")
    length = length_caveat(group, section.groups)
    if length:
        caveats.append(length)
    return caveats


def setting_caveats(runs: list[Run]) -> list[str]:
    """What limits the runs' fidelity to the setting they emulate: summary.json's shape (oversubscribed cores),
    isolation (not isolated, unfaithful CPU shares, time dilation) and machine (other load on the machine)."""
    caveats = []
    shapes = [s for s in (r.summary.get("shape") for r in runs) if s]
    crowded = [s for s in shapes if s.get("fits") is False or (s.get("oversubscription") or 0) > 1]
    if crowded:
        worst = max(crowded, key=lambda s: s.get("oversubscription") or 0)
        caveats.append(f"oversubscribed (by {number(worst.get('oversubscription'))}×, on {worst.get('cores')} cores)")
    elif not shapes:
        caveats += list(dict.fromkeys(filter(None, (shared_cores(r) for r in runs))))
    isolation = [i for i in (r.summary.get("isolation") for r in runs) if i]
    reasons = list(dict.fromkeys(i.get("reason") for i in isolation if i.get("status") == "not isolated"))
    if reasons:
        caveats.append("not isolated" + (f" ({'; '.join(filter(None, reasons))})" if any(reasons) else ""))
    if any(i.get("faithful") is False for i in isolation):
        figures = list(dict.fromkeys(f for i in isolation for f in i.get("unfaithful") or []))
        caveats.append("unfaithful" + (f": {'; '.join(figures)}" if figures else ""))
    dilations = sorted({i["dilation"] for i in isolation if i.get("dilation") not in (None, 1, 1.0)})
    if dilations:
        caveats.append(f"dilated by {', '.join(number(d) for d in dilations)}")
    machines = [m for m in (r.summary.get("machine") for r in runs) if m]
    busy = [m for m in machines if m.get("alone") is False]
    if busy:
        share = max((m.get("other_cpu_share") or 0) for m in busy)
        caveats.append("not alone on the machine" + (f" (other processes: up to {share:.0%} of its CPU)"
                                                     if share else ""))
    return caveats


def shared_cores(run) -> str | None:
    """Processes that asked for more CPUs than the cores they were pinned to (peers.result.cores)."""
    pinned = [(p.get("result") or {}).get("cores") or [] for p in run.summary.get("peers") or []]
    per_process = run.config["peer_cpus"] * (run.config["peers"] if run.is_baseline else 1)  # single: N x c threads
    asked = per_process * len(pinned)
    distinct = len({c for cores in pinned for c in cores})
    if not distinct or distinct >= asked:
        return None
    return f"oversubscribed: {asked} CPUs asked, {distinct} cores on this host, so processes shared cores"


def length_caveat(group: Group, groups: list[Group]) -> str | None:
    """Runs of unequal length: other max_steps, or fewer samples trained than the longest configuration."""
    parts = []
    steps = sorted({g.first.config["max_steps"] for g in groups})
    if len(steps) > 1:
        parts.append(f"max_steps={group.first.config['max_steps']} (this comparison: "
                     f"{', '.join(map(str, steps))})")
    samples = summary_mean(group, "total_samples") or 0
    most = max(summary_mean(g, "total_samples") or 0 for g in groups)
    if samples < most:
        parts.append(f"{samples:,.0f} samples trained, {most:,.0f} in the longest configuration")
    return "unequal length: " + "; ".join(parts) if parts else None


def is_reference(group: Group, groups: list[Group]) -> bool:
    """A single-process group on fewer CPUs than every configuration that averages: shown, not ranked."""
    averaging = [g.first.total_cpus for g in groups if not g.first.is_baseline]
    return group.first.is_baseline and bool(averaging) and group.first.total_cpus < min(averaging)


def answer_of(ranking: list[Group], synthetic: bool, comparisons: list[Comparison], margin: float) -> str | None:
    """The best-ranked configuration that averages, set against one process on the same CPUs (and against the
    runner-up), with the caveats of the setting."""
    averaging = [g for g in ranking if not g.first.is_baseline]
    if not averaging:
        return None
    best = averaging[0]
    reached = best.values(lambda r: r.summary.get("time_to_target_s"))
    if not synthetic and len(reached) == len(best.runs):
        how = (f"reaches {target_text(best)} first among the averaging strategies "
               f"({number(statistics.fmean(reached))} s, mean of {len(reached)})")
    elif synthetic:
        how = "has the highest throughput among the averaging strategies (synthetic data: throughput only)"
    else:
        how = (f"has the highest throughput among the averaging strategies; none reached {target_text(best)} in "
               "every repeat")
    total = cpus(best.first.total_cpus)
    sentences = [f"Answer: {best.label} {how}"]
    against = against_baseline(best, comparisons)
    if against is None:
        sentences[0] += f"; no run of one process on {total} to compare it with (command below)."
    else:
        decision = decide(against.ratio, against.adjusted_p, margin) if against.ratio.n else None
        sentences[0] += f"; {against.claim(f'one process on the same {total}', margin)}"
        sentences[0] += (": here, no averaging strategy beats a single process with the same CPUs."
                         if decision == SLOWER else ".")
    runner_up = next((c for c in comparisons if c.group is best and len(averaging) > 1 and c.other is averaging[1]),
                     None)
    if runner_up:
        claim = runner_up.claim(averaging[1].label, margin)
        sentences.append(f"{claim[0].upper()}{claim[1:]}.")
    caveats = setting_caveats(best.runs + (best.baseline.runs if best.baseline else []))
    if caveats:
        sentences.append(f"Caveats: {'; '.join(caveats)}.")
    return " ".join(sentences)


def noise_of(comparisons: list[Comparison]) -> str | None:
    """How many paired blocks, the noise they measured, and the smallest difference they can detect."""
    if not comparisons:
        return None
    blocks = max(c.ratio.n for c in comparisons)
    spread = pooled_log_sd([c.ratio for c in comparisons])
    if spread is None:
        return ("One block per comparison: no interval can be computed, so no ratio here is a result; run the "
                "multirun with repeats=2 or more (the default is 3).")
    return (f"Noise: {blocks} paired blocks; the paired ratios vary by {spread:.1%} (sd of their logs, pooled over "
            f"the comparisons), so {blocks} blocks detect a difference of about ±{detectable(spread, blocks):.0%} "
            "or more (5 % two-sided, 80 % power).")


def margin_of(section: Section) -> float:
    return (section.groups[0].first.config.get("report") or {}).get("equivalence_margin", DEFAULT_MARGIN)


def section_verdict(section: Section) -> Verdict:
    ranking = ranked(section)
    compared = [g for g in ranking if not is_reference(g, section.groups)]
    references = [g for g in ranking if is_reference(g, section.groups)]
    comparisons = comparisons_of(compared, section.synthetic)
    margin = margin_of(section)

    def entry(group: Group) -> Entry:
        return Entry(group.label, figures_of(group, section.synthetic, comparisons, margin),
                     caveats_of(group, section))

    runs = [r for g in section.groups for r in g.runs]
    return Verdict(section.title, answer_of(compared, section.synthetic, comparisons, margin), noise_of(comparisons),
                   [entry(g) for g in compared], [entry(g) for g in references],
                   [override_command(o) for o in missing_baselines(runs)])


def intro(sections: list[Section]) -> list[str]:
    lines = [METHOD]
    if len(sections) > 1:
        combos = "; ".join(f"{s.data} / {s.model}" for s in sections)
        lines.append(SEVERAL_SECTIONS.format(count=len(sections), combos=combos))
    return lines


COMMANDS_NOTE = ("Baselines missing from this comparison: these commands produce them (add hydra.run.dir=... as "
                 "you like), then rebuild the report over the old and the new run directories with "
                 "`python -m metrics.report DIR [DIR ...] -o OUT`.")


def verdict_html(sections: list[Section], verdicts: list[Verdict]) -> str:
    e = html.escape
    parts = ["<section id='verdict'><h2>Verdict</h2>"] + [f"<p class='note'>{e(line)}</p>" for line in intro(sections)]
    for verdict in verdicts:
        parts.append(f"<h3>{e(verdict.title)}</h3>")
        if verdict.answer:
            parts.append(f"<p class='answer'><b>{e(verdict.answer)}</b></p>")
        if verdict.noise:
            parts.append(f"<p class='note'>{e(verdict.noise)}</p>")
        for tag, entries in (("ol", verdict.entries), ("ul", verdict.references)):
            if tag == "ul" and entries:
                parts.append(f"<p class='note'>{e(REFERENCES_NOTE)}</p>")
            parts.append(f"<{tag} class='verdict'>")
            for entry in entries:
                caveats = f" <span class='caveat'>⚠ {e('; '.join(entry.caveats))}</span>" if entry.caveats else ""
                parts.append(f"<li><b>{e(entry.label)}</b>: {e(', '.join(entry.figures))}.{caveats}</li>")
            parts.append(f"</{tag}>")
        if verdict.commands:
            parts.append(f"<p class='note'>{e(COMMANDS_NOTE)}</p>")
            parts += [f"<pre>{e(command)}</pre>" for command in verdict.commands]
    return "".join(parts) + "</section>"


def verdict_markdown(sections: list[Section], verdicts: list[Verdict]) -> str:
    parts = ["## Verdict", ""] + [f"{line}\n" for line in intro(sections)]
    for verdict in verdicts:
        parts += [f"### {verdict.title}", ""]
        if verdict.answer:
            parts += [f"**{verdict.answer}**", ""]
        if verdict.noise:
            parts += [verdict.noise, ""]
        for rank, entry in enumerate(verdict.entries, 1):
            caveats = f" ⚠ {'; '.join(entry.caveats)}" if entry.caveats else ""
            parts.append(f"{rank}. **{entry.label}**: {', '.join(entry.figures)}.{caveats}")
        parts.append("")
        if verdict.references:
            parts += [REFERENCES_NOTE, ""]
            for entry in verdict.references:
                caveats = f" ⚠ {'; '.join(entry.caveats)}" if entry.caveats else ""
                parts.append(f"- **{entry.label}**: {', '.join(entry.figures)}.{caveats}")
            parts.append("")
        if verdict.commands:
            parts += [COMMANDS_NOTE, ""] + [f"    {command}" for command in verdict.commands] + [""]
    return "\n".join(parts) + "\n"
