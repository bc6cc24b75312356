"""metrics/methods.yaml: every section is stated by a module, with every constant it names filled in."""
import re
from pathlib import Path

from metrics.projection.project import METHODS as PROJECTION
from metrics.recording.methods import sections
from metrics.report.build import METHOD as REPORT
from metrics.summary.build import METHODS as SUMMARY
from metrics.summary.link import FAITHFUL_SHARE

ROOT = Path(__file__).resolve().parents[2]


def test_every_section_is_stated_by_a_module_and_no_placeholder_is_left():
    code = "\n".join(p.read_text() for folder in ("metrics", "bench") for p in (ROOT / folder).rglob("*.py"))
    assert {s for s in sections() if f'methods("{s}"' not in code} == set()
    for texts in (SUMMARY, REPORT, PROJECTION):
        assert not [k for k, text in texts.items() if re.search(r"\{[A-Za-z_]", text)]
    assert f"goodput_share >= {FAITHFUL_SHARE:.0%}" in SUMMARY["link"]  # the module's constant, as it is now
