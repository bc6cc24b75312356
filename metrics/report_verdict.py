"""The verdict at the top of the report: per (dataset, model) section, the configurations ranked by time-to-target
(then throughput), one sentence each (speedup, scaling efficiency, bytes per sample, worst worker, bottleneck) with
the caveats that concern it, and the commands that would produce the baselines the comparison lacks."""
import html
import statistics
from dataclasses import dataclass

from metrics.report_data import Group, Section, missing_baselines, override_command
from metrics.report_tables import bottleneck, cpus, error_headline, failure_counters, number, ranked

METHOD = ("Ranked by time-to-target (summary.json's time_to_target_s; configurations reaching the target in every "
          "repeat first), then by global throughput (all workers' samples / the longest worker's training time, "
          "samples/s); on synthetic data by throughput only. Speedup: throughput / that of the equal-resource "
          "baseline, the `single` run on the same data, model and batch per peer with as many CPUs in total "
          "(peers × CPUs per peer). Scaling efficiency: throughput / (peers × throughput of the `single` run with "
          "1 peer of the same CPUs). Bytes per sample: payload bytes a worker sent per sample it trained "
          "(bytes_sent_per_sample; KiB = 1024 bytes). Worst worker: the lowest final test accuracy over workers "
          "(fraction of the held-out split). Bottleneck: the largest share of the mean step "
          "(time_breakdown_share): data, compute (forward, backward, optimizer update) or communication. "
          "Repeats (same configuration, other seed): means.")
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
    answer: str | None   # one sentence: the strategy that wins, against its equal-resource baseline
    entries: list[Entry]
    references: list[Entry]  # single-process runs on fewer CPUs, kept for scaling efficiency, not ranked
    commands: list[str]  # train.py commands producing the missing baselines


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


def speedup_text(group: Group) -> str:
    total = cpus(group.first.total_cpus)
    if group.baseline is group:
        return f"is the equal-resource baseline ({total})"
    if group.baseline is None:
        return f"speedup n/a: no equal-resource baseline (a single run with {total}; command below)"
    speedup = mean(group, lambda r: r.speedup)
    return f"{speedup:.2f}× {group.baseline.label} (the equal-resource baseline, {total})"


def scaling_text(group: Group) -> str:
    peers, per_peer = group.first.shape
    if group.one_peer is None:
        return (f"scaling efficiency n/a: no 1×{per_peer} run (single, 1 peer of {cpus(per_peer)}; "
                "command below)")
    efficiency = mean(group, lambda r: r.scaling_efficiency)
    return f"scaling efficiency {efficiency:.2f} (vs {peers} × {group.one_peer.label})"


def figures_of(group: Group, synthetic: bool) -> list[str]:
    figures = []
    reached = group.values(lambda r: r.summary.get("time_to_target_s"))
    if not synthetic and len(reached) == len(group.runs):
        figures.append(f"reached {target_text(group)} in {number(statistics.fmean(reached))} s")
    throughput = summary_mean(group, "throughput_samples_per_s")
    if throughput is not None:
        figures.append(f"{number(throughput)} samples/s")
        figures += [speedup_text(group), scaling_text(group)]
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
    shared = shared_cores(group.first)
    if shared:
        caveats.append(shared)
    if any((r.summary.get("device") or {}).get("gpu_shared") for r in group.runs):
        caveats.append("peers shared GPUs (more peers than GPUs on a host): not one GPU per peer")
    if section.synthetic or any(r.summary.get("data_is_synthetic") for r in group.runs):
        caveats.append("synthetic data: throughput only, accuracy has no meaning")
    length = length_caveat(group, section.groups)
    if length:
        caveats.append(length)
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


def answer_of(ranking: list[Group], synthetic: bool) -> str | None:
    """The best-ranked configuration that averages, set against one process on the same CPUs."""
    best = next((g for g in ranking if not g.first.is_baseline), None)
    if best is None:
        return None
    reached = best.values(lambda r: r.summary.get("time_to_target_s"))
    if not synthetic and len(reached) == len(best.runs):
        how = f"reaches {target_text(best)} first among the averaging strategies ({number(statistics.fmean(reached))} s)"
    elif synthetic:
        how = "has the highest throughput among the averaging strategies (synthetic data: throughput only)"
    else:
        how = (f"has the highest throughput among the averaging strategies; none reached {target_text(best)} in "
               "every repeat")
    total = cpus(best.first.total_cpus)
    if best.baseline is None:
        return f"Answer: {best.label} {how}; no run of one process on {total} to compare it with (command below)."
    speedup = mean(best, lambda r: r.speedup)
    if speedup is not None and speedup >= 1:
        return f"Answer: {best.label} {how}, {speedup:.2f}× one process on the same {total}."
    return (f"Answer: {best.label} {how}, but it is {number(speedup)}× one process on the same {total}: here, no "
            "averaging strategy beats a single process with the same CPUs.")


def section_verdict(section: Section) -> Verdict:
    ranking = ranked(section)
    compared = [g for g in ranking if not is_reference(g, section.groups)]
    references = [g for g in ranking if is_reference(g, section.groups)]

    def entry(group: Group) -> Entry:
        return Entry(group.label, figures_of(group, section.synthetic), caveats_of(group, section))

    runs = [r for g in section.groups for r in g.runs]
    return Verdict(section.title, answer_of(compared, section.synthetic), [entry(g) for g in compared],
                   [entry(g) for g in references], [override_command(o) for o in missing_baselines(runs)])


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
