"""The report model (metrics/report/model.py), built once from the runs: verdict, tables, figures, notes,
errors, methods and the rows of runs.csv."""
import time
from pathlib import Path

from metrics.report.baselines import load_runs
from metrics.report.compare import PAIRED_T, TOST
from metrics.report.model import Report, SectionReport
from metrics.report.primary import time_observation
from metrics.report.projected import projected_tables
from metrics.report.runs import Run, Section, flatten, read_plan, sweep_efficiency
from metrics.report.tables import answer_table, error_headline, fault_tolerance, section_tables
from metrics.report.verdict import intro, section_verdict
from metrics.recording.methods import methods
from metrics.summary.schema import Json

METHOD = methods("report", PAIRED_T=PAIRED_T, TOST=TOST)
SEVERAL_NODES = methods("nodes")  # a run over several nodes: how the report reads it


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
    if efficiency := efficiency_line(sections):
        lines.append(efficiency)
    lines.append("Units: seconds (s), bytes, KiB = 2^10 bytes, MiB = 2^20 bytes, samples/s, % (CPU: 100 = one core). "
                 "Every figure's method is stated under its table or plot and in 'Methods' at the end.")
    return lines


def efficiency_line(sections: list[Section]) -> str | None:
    """The sweep efficiency of the report's sweeps that recorded their elapsed time (None: none did)."""
    if not (found := sweep_efficiency([run for section in sections for run in section.runs])):
        return None
    efficiency, elapsed_s = found
    return (f"Sweep efficiency {efficiency:.2f}: the runs' training time to the target (to their horizon, all they "
            f"trained, where they missed it; a dilated run's in the seconds it spent), "
            f"{efficiency * elapsed_s:,.0f} s, / the sweep's elapsed time, {elapsed_s:,.0f} s (each command that ran "
            "it, from its start to its last run's end).")


def methods_of(sections: list[Section]) -> list[tuple[str, str]]:
    merged = dict(METHOD)
    if any(run.nnodes > 1 for _, run in all_runs(sections)):
        merged |= SEVERAL_NODES
    for _, run in all_runs(sections):
        for key, text in (run.summary.methods or {}).items():
            merged.setdefault(key, text)
    scopes = sorted({(r.summary.network_scope or "?") for _, r in all_runs(sections)})
    merged["network_scope"] = "network counters of these runs: " + "; ".join(scopes)
    return list(merged.items())


def errors(sections: list[Section]) -> list[tuple[str, str]]:
    """(run, full error) for every run and attempt that has one, peers' own tracebacks included."""
    return [(f"{label}{' superseded attempt' if run.superseded else ''} block={run.config.get('block')} "
             f"seed={run.config.get('seed')} ({run.path})", "\n\n".join(run.errors()))
            for label, run in all_runs(sections) if run.errors()]


def positions(run: Run) -> Json:
    """Where the sweep's plan put the run: its position in its block and the Williams sequence."""
    if run.sweep is None:
        return {}
    job = run.path.relative_to(run.sweep).as_posix()
    for entry in read_plan(run.sweep).get("order") or []:
        if entry.get("job") == job:
            return {"order.position": entry.get("position"), "order.sequence": entry.get("sequence")}
    return {}


def csv_rows(sections: list[Section]) -> list[Json]:
    rows = []
    section_runs = {id(run): section.runs for section in sections for run in section.runs}
    for label, run in all_runs(sections):
        s = run.summary
        peers = run.peer_summaries()
        row = {"run_dir": str(run.path), "configuration": label,
               "attempt": run.attempt,
               "arm": run.config.get("arm") or "", **positions(run),
               "hosts": " ".join(run.hosts)}
        row |= s.figures("status", "exit_code", "failed_rank", "lost_peers", "data_is_synthetic", "network_scope",
                         "started_at", "wall_s", "total_samples", "throughput_samples_per_s")
        observation = time_observation(run)
        row |= {"speedup_vs_single": run.speedup, "scaling_efficiency": run.scaling_efficiency,
                "worst_worker_accuracy": run.worst_worker_accuracy(), "reached_target": observation.reached,
                "time_to_target_bounds_s": [observation.low, observation.high],
                "unfaithful": "; ".join(run.unfaithful()), "speed_reference_moved": run.speed_reference.moved,
                "speed_reference_vs_block": run.slower_than_block(section_runs.get(id(run), []))}
        row |= s.figures("time_to_target_s", "samples_to_target", "time_per_sample_s", "steps_to_target",
                         "final_test_accuracy", "final_test_loss", "bytes_sent_per_step", "bytes_recv_per_step",
                         "bytes_sent_per_sample", "bytes_recv_per_sample")
        row |= flatten({"time_breakdown_s": s.time_breakdown_s or {},
                        "time_breakdown_share": s.time_breakdown_share or {},
                        "wall_phases_s": s.wall_phases_s.to_dict() or {}})
        rss = [p.peak_rss_bytes for p in peers if p.peak_rss_bytes is not None]
        cpu = [p.mean_cpu_percent for p in peers if p.mean_cpu_percent is not None]
        row |= {"peak_rss_bytes_max_over_peers": max(rss) if rss else None,
                "mean_cpu_percent_mean_over_peers": sum(cpu) / len(cpu) if cpu else None,
                "fault_tolerance": fault_tolerance(s), "error": error_headline(s.error)}
        row |= {f"config.{k}": v for k, v in flatten(run.config).items()}
        row |= {f"strategy_result.{k}": v for k, v in run.strategy_figures().items()}
        rows.append(row)
    return rows


def build(sources: list[Path], project: list[str] | None = None) -> Report:
    """The report over the runs under these directories; project: report.project's LINK:N targets."""
    from metrics.report.plots import forest_plot, section_plots  # matplotlib only when a report is built

    sections, left_out = load_runs(sources)
    if not sections:
        raise NoRuns(f"no runs (directories holding summary.json) under {', '.join(map(str, sources))}"
                     + "".join(f"; left out: {why}" for why in left_out))
    parts = []
    for section in sections:
        verdict, analysis = section_verdict(section)
        shown = analysis.ranking + analysis.references + [g for g in section.groups if g.is_control]
        comparisons, controls = analysis.comparisons, analysis.controls
        parts.append(SectionReport(section.title, verdict, answer_table(comparisons, controls),
                                   forest_plot(comparisons, controls, analysis.primary),
                                   section_tables(shown, analysis.primary, comparisons, controls),
                                   section_plots(section, shown)))
    return Report(time.strftime("%Y-%m-%d %H:%M:%S %Z"), [str(s) for s in sources], intro(sections), parts,
                  notes(sections, left_out), errors(sections), methods_of(sections), csv_rows(sections),
                  projected_tables(sections, project) if project else [])
