"""The report model rendered: report.html and report.md by the jinja2 templates beside this file, runs.csv from
the model's rows. One model, so the three outputs cannot disagree."""
import csv
import json
from pathlib import Path

import jinja2

from metrics.report.model import Report

TEMPLATES = Path(__file__).resolve().parent / "templates"
STYLE = """
body { font-family: sans-serif; margin: 1em auto; padding: 0 1em; max-width: 1400px; color: #222; line-height: 1.4; }
.table { overflow-x: auto; margin: 0.5em 0 1.5em; } table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; vertical-align: top; overflow-wrap: break-word; }
th { background: #f0f0f0; text-align: center; } td.text { text-align: left; }
#verdict { background: #f4f8ff; border: 1px solid #c9d8f0; padding: 0 1em 0.5em; }
#verdict h2 { margin-top: 0.5em; } ol.verdict li { margin: 0.3em 0; } .caveat { color: #a33; }
.answer { font-size: 1.05em; } .primary { font-weight: bold; color: #234; }
.note { color: #555; font-size: 0.85em; max-width: 1100px; } .page-note { background: #fff7e0; padding: 0.5em 1em; }
figure { margin: 1em 0 2em; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.85em; max-width: 1100px; }
pre { background: #f6f6f6; padding: 0.7em; white-space: pre-wrap; overflow-wrap: anywhere; font-size: 0.8em; }
h2 { border-bottom: 2px solid #ddd; margin-top: 2em; }
"""


def markdown_cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def is_text(cell: object) -> bool:
    """Numbers (also "1.2 ± 0.3", "–") align right, text left."""
    return any(c.isalpha() for c in str(cell))


def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                             autoescape=lambda name: name is not None and name.endswith(".html.j2"),
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["cell"] = markdown_cell
    env.tests["text"] = is_text
    return env


def render(report: Report, template: str) -> str:
    return environment().get_template(template).render(report=report, style=STYLE)


def write_csv(report: Report, path: Path) -> None:
    columns = list(dict.fromkeys(k for row in report.runs for k in row))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        for row in report.runs:
            writer.writerow({k: "" if v is None else json.dumps(v) if isinstance(v, (list, dict)) else v
                             for k, v in row.items()})


def write(report: Report, out_dir: Path) -> dict[str, Path]:
    """report.html, report.md and runs.csv into out_dir; their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"html": out_dir / "report.html", "md": out_dir / "report.md", "csv": out_dir / "runs.csv"}
    paths["html"].write_text(render(report, "report.html.j2"))
    paths["md"].write_text(render(report, "report.md.j2"))
    write_csv(report, paths["csv"])
    return paths
