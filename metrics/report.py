"""Comparison report over runs: report.html (self-contained, plots embedded), report.md, runs.csv.

    python -m metrics.report DIR [DIR ...] [-o OUT]

DIR: run or multirun directories; every directory below holding summary.json is a run.
After `train.py -m ...` the Hydra callback launchers.sweep.SweepReport writes the report
into the multirun directory.
"""
import argparse
import csv
import html
import json
import sys
import time
from pathlib import Path

from metrics.report_data import Run, Section, flatten, load_runs
from metrics.report_tables import error_headline, fault_tolerance, ranked, section_tables
from metrics.report_verdict import section_verdict, verdict_html, verdict_markdown

report_errors: list[str] = []  # reports that failed in this process (train.py's exit code reflects them)


class NoRuns(Exception):
    pass


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


def all_runs(sections: list[Section]) -> list[tuple[str, Run]]:
    return [(g.label, r) for s in sections for g in s.groups for r in g.runs]


def methods(sections: list[Section]) -> dict[str, str]:
    merged = {}
    for _, run in all_runs(sections):
        for key, text in (run.summary.get("methods") or {}).items():
            merged.setdefault(key, text)
    scopes = sorted({r.summary.get("network_scope", "?") for _, r in all_runs(sections)})
    merged["network_scope"] = "network counters of these runs: " + "; ".join(scopes)
    return merged


def errors(sections: list[Section]) -> list[tuple[str, str]]:
    """(run, full error) for every run that has one, peers' own tracebacks included."""
    found = []
    for label, run in all_runs(sections):
        texts = [run.summary.get("error")] + [p.get("error") for p in run.peer_summaries()]
        texts = [t.strip() for t in texts if t]
        if texts:
            found.append((f"{label} seed={run.config.get('seed')} ({run.path})", "\n\n".join(dict.fromkeys(texts))))
    return found


# Output files.

def write_csv(sections: list[Section], path: Path) -> None:
    rows = []
    for label, run in all_runs(sections):
        s = run.summary
        peers = run.peer_summaries()
        row = {"run_dir": str(run.path), "configuration": label}
        row |= {k: s.get(k) for k in ("status", "exit_code", "failed_rank", "lost_peers", "data_is_synthetic",
                                      "network_scope", "started_at", "wall_s", "total_samples",
                                      "throughput_samples_per_s")}
        row["speedup_vs_single"] = run.speedup
        row["scaling_efficiency"] = run.scaling_efficiency
        row["worst_worker_accuracy"] = run.worst_worker_accuracy()
        row |= {k: s.get(k) for k in ("time_to_target_s", "samples_to_target", "time_per_sample_s",
                                      "steps_to_target", "final_test_accuracy",
                                      "final_test_loss", "bytes_sent_per_step", "bytes_recv_per_step",
                                      "bytes_sent_per_sample", "bytes_recv_per_sample")}
        row |= flatten({"time_breakdown_s": s.get("time_breakdown_s") or {},
                        "time_breakdown_share": s.get("time_breakdown_share") or {}})
        rss = [p["peak_rss_bytes"] for p in peers if p.get("peak_rss_bytes") is not None]
        cpu = [p["mean_cpu_percent"] for p in peers if p.get("mean_cpu_percent") is not None]
        row["peak_rss_bytes_max_over_peers"] = max(rss) if rss else None
        row["mean_cpu_percent_mean_over_peers"] = sum(cpu) / len(cpu) if cpu else None
        row["fault_tolerance"] = fault_tolerance(s)
        row["error"] = error_headline(s.get("error"))
        row |= {f"config.{k}": v for k, v in flatten(run.config).items()}
        row |= {f"strategy_result.{k}": v for k, v in run.strategy_figures().items()}
        rows.append(row)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else json.dumps(v) if isinstance(v, (list, dict)) else v
                             for k, v in row.items()})


def write_markdown(sections, verdicts, tables, page_notes, path: Path, sources: list[Path]) -> None:
    parts = ["# avgbench comparison report", "", f"Generated {time.strftime('%Y-%m-%d %H:%M:%S %Z')} from "
             + ", ".join(f"`{s}`" for s in sources) + ". Plots: see report.html.", ""]
    parts.append(verdict_markdown(sections, verdicts))
    parts += [f"> {n}\n" for n in page_notes]
    for section in sections:
        parts += [f"## {section.title}", ""] + [t.markdown() for t in tables[id(section)]]
    found = errors(sections)
    if found:
        parts += ["## Errors", ""] + [f"**{name}**\n\n```\n{text}\n```\n" for name, text in found]
    parts += ["## Methods", ""] + [f"- **{k}**: {v}" for k, v in methods(sections).items()]
    path.write_text("\n".join(parts) + "\n")


STYLE = """
body { font-family: sans-serif; margin: 1em auto; padding: 0 1em; max-width: 1400px; color: #222; line-height: 1.4; }
.table { overflow-x: auto; margin: 0.5em 0 1.5em; } table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; vertical-align: top; overflow-wrap: break-word; }
th { background: #f0f0f0; text-align: center; } td.text { text-align: left; }
#verdict { background: #f4f8ff; border: 1px solid #c9d8f0; padding: 0 1em 0.5em; }
#verdict h2 { margin-top: 0.5em; } ol.verdict li { margin: 0.3em 0; } .caveat { color: #a33; }
.note { color: #555; font-size: 0.85em; max-width: 1100px; } .page-note { background: #fff7e0; padding: 0.5em 1em; }
figure { margin: 1em 0 2em; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.85em; max-width: 1100px; }
pre { background: #f6f6f6; padding: 0.7em; white-space: pre-wrap; overflow-wrap: anywhere; font-size: 0.8em; }
h2 { border-bottom: 2px solid #ddd; margin-top: 2em; }
"""


def write_html(sections, verdicts, tables, plots, page_notes, path: Path, sources: list[Path]) -> None:
    e = html.escape
    body = [f"<h1>avgbench comparison report</h1><p class='note'>Generated {e(time.strftime('%Y-%m-%d %H:%M:%S %Z'))}"
            f" from {e(', '.join(str(s) for s in sources))}.</p>", verdict_html(sections, verdicts)]
    body += [f"<p class='page-note'>{e(n)}</p>" for n in page_notes]
    for section in sections:
        body.append(f"<h2>{e(section.title)}</h2>")
        section_tables = tables[id(section)]
        body += [t.html() for t in section_tables[:2]]
        body += [f"<figure><h3>{e(p.title)}</h3><img alt='{e(p.title)}' src='data:image/png;base64,{p.png_base64}'>"
                 f"<figcaption>{e(p.caption)}</figcaption></figure>" for p in plots[id(section)]]
        body += [t.html() for t in section_tables[2:]]
    found = errors(sections)
    if found:
        body.append("<h2>Errors</h2>")
        body += [f"<h3>{e(name)}</h3><pre>{e(text)}</pre>" for name, text in found]
    body.append("<h2>Methods</h2><ul>")
    body += [f"<li><b>{e(k)}</b>: {e(v)}</li>" for k, v in methods(sections).items()]
    body.append("</ul>")
    path.write_text(f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>avgbench comparison report</title>"
                    f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>\n")


def build_report(sources: list[Path], out_dir: Path) -> dict[str, Path]:
    """Write report.html, report.md and runs.csv into out_dir; returns their paths."""
    from metrics.report_plots import section_plots  # matplotlib only when a report is built

    sections, left_out = load_runs(sources)
    if not sections:
        raise NoRuns(f"no runs (directories holding summary.json) under {', '.join(map(str, sources))}"
                     + "".join(f"; left out: {why}" for why in left_out))
    verdicts = [section_verdict(s) for s in sections]
    tables = {id(s): section_tables(s) for s in sections}
    plots = {id(s): section_plots(s, ranked(s)) for s in sections}
    page_notes = notes(sections, left_out)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"html": out_dir / "report.html", "md": out_dir / "report.md", "csv": out_dir / "runs.csv"}
    write_html(sections, verdicts, tables, plots, page_notes, paths["html"], sources)
    write_markdown(sections, verdicts, tables, page_notes, paths["md"], sources)
    write_csv(sections, paths["csv"])
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m metrics.report", description=__doc__.split("\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="run or multirun directories")
    parser.add_argument("-o", "--out", type=Path, help="output directory (default: DIR when only one is given)")
    args = parser.parse_args(argv)
    missing = [d for d in args.dirs if not d.is_dir()]
    if missing:
        parser.exit(2, f"avgbench: error: not a directory: {', '.join(map(str, missing))}\n")
    if args.out is None and len(args.dirs) > 1:
        parser.exit(2, "avgbench: error: several directories: name the output directory with -o OUT\n")
    try:
        paths = build_report(args.dirs, args.out or args.dirs[0])
    except NoRuns as exc:
        parser.exit(2, f"avgbench: error: {exc}\n")
    print(f"avgbench: comparison report: {paths['html']} (also report.md, runs.csv)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
