"""The report model (metrics/report/model.py), built once from the runs: verdict, tables, figures, notes,
errors, methods and the rows of runs.csv."""
import time
from pathlib import Path

from metrics.report.baselines import load_runs
from metrics.report.compare import PAIRED_T, TOST
from metrics.report.model import Report, SectionReport
from metrics.report.primary import time_observation
from metrics.report.projected import projected_tables
from metrics.report.runs import Run, Section, flatten, read_plan
from metrics.report.tables import error_headline, fault_tolerance, section_tables
from metrics.report.verdict import intro, section_verdict

METHOD = {
    "primary figure": "The verdict ranks and claims on one figure, declared before the first run (config "
                      "report.primary, written into the sweep's plan SWEEP_DIR/.avgbench/sweep.json at launch with "
                      "its metric, target value and estimator; auto: time-to-target on real data, throughput on "
                      "synthetic data). Throughput and every other figure stand beside it and never replace it. A "
                      "sweep resumed under another plan (another primary figure, number of blocks or set of "
                      "comparisons) gets no verdict.",
    "pairing": "A multirun runs every configuration, its baselines and the control arm once per block (`repeats` "
               "blocks, or `repeats=auto`: the blocks a power calculation asks for, fixed before the first run). "
               "Each configuration is compared with the runs of the same block (a paired ratio: the machine's slow "
               "drift cancels); runs outside any block pair with each other. The order of the jobs in a block "
               "follows a Williams design (a carry-over balanced Latin square; 2n sequences for an odd number n of "
               "jobs), recorded in runs.csv (order.position, order.sequence).",
    "time-to-target ratios": "Ratio = the other's time-to-target / this one's (> 1: this one is faster). A run "
                             "that missed the target is right-censored (its time exceeds what it covered, its "
                             "horizon: the training time of its evaluation before the last, since a crossing there "
                             "could not be confirmed); a crossing at the first evaluation (time 0) lies between the "
                             "start and the run's next evaluation; a failed run is a miss alike (only a completed "
                             "run reaches the target). Nothing is dropped: a miss is counted at its horizon (its "
                             "best case), never ahead of the other run in its block; a crossing at the first "
                             "evaluation at its next evaluation (its worst case), never behind the other; both "
                             "missed: a tie. Throughput: a failed run (the worst outcome) is counted as at best a "
                             "tie. Estimator: the paired Student-t on the log ratios over all blocks (geometric mean, "
                             "95 % t-interval, t-test: one estimator), its sd floored at the section's pooled noise "
                             "(blocks observed exactly) so that a chance agreement of few blocks is no claim. A "
                             "ratio resting on a side's best case is printed as a bound (≤ or ≥). One block, or zero "
                             "spread: no interval.",
    "claims": f"'faster' / 'slower': the {PAIRED_T} in the estimate's direction; 'no faster' (equivalent): a "
              f"{TOST} within the declared smallest effect of interest, report.smallest_effect (a ratio x/÷, runs "
              "that predate it: 1.25). No claim in favour of a configuration counted at its best case in some block "
              "(it missed or failed there: MLPerf's rule, a run that does not converge cannot help a result), and "
              "no equivalence with such a block. Each comparison enters Holm's family over the section's declared "
              "comparisons with its permitted claim of smallest p (at most one of its two nulls, no difference or "
              "a difference beyond the smallest effect, is true, so Holm bounds the family-wise error of every "
              "claim); a claim needs its adjusted p < 0.05; otherwise 'cannot tell'. A declared comparison without "
              "a test counts in Holm's family with p = 1.",
    "declared comparisons": "Every configuration that averages against its equal-resource baseline (the `single` "
                            "run on the same data, model and batch per peer with as many CPUs in total), and every "
                            "pair of such configurations: one Holm family per (dataset, model), fixed by the "
                            "configurations alone, never chosen from the ranking.",
    "control arm": "Every block runs the equal-resource baseline twice (the second run: arm=control). The ratio of "
                   "the two, with its interval, is the noise floor between two runs of one configuration in one "
                   "block; when its interval excludes 1 the blocks are not comparable and the verdict makes no "
                   "claim. The control is not in Holm's family.",
    "noise": "The primary figure's own noise: the sd of the log ratios of the comparisons with the baselines and "
             "of the control arms, over blocks observed exactly, pooled by degrees of freedom. The detectable "
             "ratio: (t(1 - 0.05/(2m), n - 1) + t(0.8, n - 1)) x sd / sqrt(n), exp'd, for n blocks and m declared "
             "comparisons (Holm's first step), 80 % power (metrics/report/stats.py detectable).",
    "ranking": "On the primary figure: time-to-target: configurations that reached the target in every block "
               "first, then by blocks reached, then by MLPerf's summary (the olympic mean over blocks: fastest and "
               "slowest dropped, a miss counted as the slowest); throughput: blocks completed (a failed run is the "
               "worst outcome), then mean global throughput. The order alone is no finding.",
    "fidelity": "A run whose summary.json says isolation.faithful = false or link.faithful = false is unfaithful to "
                "the setting it emulates: no claim rests on it; its block is left out of the comparisons it is "
                "in, named with the figure that failed.",
    "attempts": "A resumed sweep moves an attempt that did not complete below SWEEP_DIR/superseded/ and runs the "
                "job again in the same block: the attempt stays in runs.csv and in the Failures table with its "
                "status and error, and the run that replaced it is marked 'run later' (its block is no longer "
                "contemporaneous).",
    "other figures": "Speedup: throughput / that of the equal-resource baseline in the same block. Scaling "
                     "efficiency: throughput / (peers x throughput of the `single` run with 1 peer of the same "
                     "CPUs). Each: geometric mean over blocks [95 % t-interval on the log ratios] (x/÷ factor, "
                     "blocks). Bytes per sample: payload bytes a worker sent per sample it trained (KiB = 1024 "
                     "bytes). Worst worker: the lowest final test accuracy over workers. Bottleneck: the largest "
                     "share of the mean step (data, compute and optimizer, or communication).",
}


SEVERAL_NODES = ("A run over several nodes (launch.nnodes > 1, e.g. under SLURM) writes one folder per node "
                 "(node<R>), each with a summary of its own peers; the report reads them as one run: all peers "
                 "together, samples summed, throughput over the longest worker across nodes, time-to-target over "
                 "every worker's learning curve (the worst worker), per-step figures over every worker's steps, the "
                 "worst node's status (a node that failed or wrote no summary fails the run, counted once) and "
                 "setting (shape, machine, link). Its equal-resource baseline is one process with peers x peer_cpus "
                 "CPUs on one node (the sweep submits baselines and the control arm as one-node jobs): where a node "
                 "has fewer cores, the baseline is oversubscribed and its caveat says by how much (summary.json's "
                 "shape).")


class NoRuns(Exception):
    pass


def all_runs(sections: list[Section]) -> list[tuple[str, Run]]:
    """(configuration label, run) for every run and superseded attempt."""
    return [(g.label, r) for s in sections for g in s.groups for r in [*g.runs, *g.attempts]]


def notes(sections: list[Section], left_out: list[str]) -> list[str]:
    lines = []
    if any(s.synthetic for s in sections):
        lines.append("Runs on synthetic data (random tensors) measure throughput only: their accuracy and loss "
                     "have no convergence meaning. Their section is labelled [synthetic data].")
    if left_out:
        lines.append("Left out of this report: " + "; ".join(left_out))
    lines.append("Units: seconds (s), bytes, KiB = 2^10 bytes, MiB = 2^20 bytes, samples/s, % (CPU: 100 = one core). "
                 "Every figure's method is stated under its table or plot and in 'Methods' at the end.")
    return lines


def methods(sections: list[Section]) -> list[tuple[str, str]]:
    merged = dict(METHOD)
    if any(run.nnodes > 1 for _, run in all_runs(sections)):
        merged["several nodes"] = SEVERAL_NODES
    for _, run in all_runs(sections):
        for key, text in (run.summary.methods or {}).items():
            merged.setdefault(key, text)
    scopes = sorted({(r.summary.network_scope or "?") for _, r in all_runs(sections)})
    merged["network_scope"] = "network counters of these runs: " + "; ".join(scopes)
    return list(merged.items())


def errors(sections: list[Section]) -> list[tuple[str, str]]:
    """(run, full error) for every run and attempt that has one, peers' own tracebacks included."""
    found = []
    for label, run in all_runs(sections):
        if run.errors():
            attempt = " superseded attempt" if run.superseded else ""
            found.append((f"{label}{attempt} block={run.config.get('block')} seed={run.config.get('seed')} "
                          f"({run.path})", "\n\n".join(run.errors())))
    return found


def positions(run: Run) -> dict:
    """Where the sweep's plan put the run: its position in its block and the Williams sequence."""
    if run.sweep is None:
        return {}
    job = run.path.relative_to(run.sweep).as_posix()
    for entry in read_plan(run.sweep).get("order") or []:
        if entry.get("job") == job:
            return {"order.position": entry.get("position"), "order.sequence": entry.get("sequence")}
    return {}


def csv_rows(sections: list[Section]) -> list[dict]:
    rows = []
    section_runs = {id(run): section.runs for section in sections for run in section.runs}
    for label, run in all_runs(sections):
        s = run.summary
        peers = run.peer_summaries()
        row = {"run_dir": str(run.path), "configuration": label,
               "attempt": "superseded" if run.superseded else "run later" if run.run_later else "current",
               "arm": run.config.get("arm") or "", **positions(run),
               "hosts": " ".join(run.hosts)}
        row |= s.figures("status", "exit_code", "failed_rank", "lost_peers", "data_is_synthetic", "network_scope",
                         "started_at", "wall_s", "total_samples", "throughput_samples_per_s")
        row["speedup_vs_single"] = run.speedup
        row["scaling_efficiency"] = run.scaling_efficiency
        row["worst_worker_accuracy"] = run.worst_worker_accuracy()
        observation = time_observation(run)
        row["reached_target"] = observation.reached
        row["time_to_target_bounds_s"] = [observation.low, observation.high]
        row["unfaithful"] = "; ".join(run.unfaithful())
        row["speed_reference_moved"] = run.speed_reference.moved
        row["speed_reference_vs_block"] = run.slower_than_block(section_runs.get(id(run), []))
        row |= s.figures("time_to_target_s", "samples_to_target", "time_per_sample_s", "steps_to_target",
                         "final_test_accuracy", "final_test_loss", "bytes_sent_per_step", "bytes_recv_per_step",
                         "bytes_sent_per_sample", "bytes_recv_per_sample")
        row |= flatten({"time_breakdown_s": s.time_breakdown_s or {},
                        "time_breakdown_share": s.time_breakdown_share or {}})
        rss = [p.peak_rss_bytes for p in peers if p.peak_rss_bytes is not None]
        cpu = [p.mean_cpu_percent for p in peers if p.mean_cpu_percent is not None]
        row["peak_rss_bytes_max_over_peers"] = max(rss) if rss else None
        row["mean_cpu_percent_mean_over_peers"] = sum(cpu) / len(cpu) if cpu else None
        row["fault_tolerance"] = fault_tolerance(s)
        row["error"] = error_headline(s.error)
        row |= {f"config.{k}": v for k, v in flatten(run.config).items()}
        row |= {f"strategy_result.{k}": v for k, v in run.strategy_figures().items()}
        rows.append(row)
    return rows


def build(sources: list[Path], project: list[str] | None = None) -> Report:
    """The report over the runs under these directories; project: report.project's targets (LINK:N), each
    averaging configuration projected to them (metrics/report/projected.py)."""
    from metrics.report.plots import section_plots  # matplotlib only when a report is built

    sections, left_out = load_runs(sources)
    if not sections:
        raise NoRuns(f"no runs (directories holding summary.json) under {', '.join(map(str, sources))}"
                     + "".join(f"; left out: {why}" for why in left_out))
    parts = []
    for section in sections:
        verdict, analysis = section_verdict(section)
        shown = analysis.ranking + analysis.references + [g for g in section.groups if g.is_control]
        parts.append(SectionReport(section.title, verdict,
                                   section_tables(shown, analysis.primary, analysis.comparisons, analysis.controls),
                                   section_plots(section, shown)))
    return Report(time.strftime("%Y-%m-%d %H:%M:%S %Z"), [str(s) for s in sources], intro(sections), parts,
                  notes(sections, left_out), errors(sections), methods(sections), csv_rows(sections),
                  projected_tables(sections, project) if project else [])
