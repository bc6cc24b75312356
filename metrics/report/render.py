"""The report model rendered: report.html and report.md by the jinja2 templates beside this file, runs.csv."""
import csv
import json
from pathlib import Path

import jinja2

from metrics.report.model import Report, Table

TEMPLATES = Path(__file__).resolve().parent / "templates"


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
    return environment().get_template(template).render(report=report)


def plain_table(table: Table) -> str:
    """A table as aligned plain text, for the terminal."""
    rows = [table.columns, *table.rows]
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(table.columns))]
    return "\n".join("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def answer_text(report: Report) -> str:
    """The first screen in plain text, per section: the answer, the comparisons table and the caveats' lines."""
    return "\n\n".join("\n".join([section.title, section.verdict.answer, "", plain_table(section.comparisons),
                                   *(f"caveat: {c.text}" for c in section.verdict.caveats)])
                       for section in report.sections)


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
