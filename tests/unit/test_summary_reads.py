"""summary.json is read through its type (metrics/summary/schema.py) only (unit tier): no code outside the type reads
a summary, or a section of one, by string key, nor parses summary.json itself."""
import ast
import typing
from pathlib import Path

from metrics.summary import schema

ROOT = Path(__file__).resolve().parents[2]
SKIPPED = ("tests", ".venv", "multirun", "outputs")
SCHEMA = ROOT / "metrics" / "summary" / "schema.py"


def chain(node: ast.expr) -> list[str] | None:
    """summary.a.b -> ["a", "b"] for an expression rooted at a summary (a name `summary` or `*_summary`, or any
    `.summary` attribute); None for any other expression."""
    names = []
    while isinstance(node, ast.Attribute):
        if node.attr == "summary":
            return names[::-1]
        names.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and (node.id == "summary" or node.id.endswith("_summary")):
        return names[::-1]
    return None


def is_section(names: list[str]) -> bool:
    """Whether summary.<names> is the Summary or one of its sections (a dict field, e.g. config, is not)."""
    kind = schema.Summary
    for name in names:
        hint = typing.get_type_hints(kind).get(name)
        if not (isinstance(hint, type) and issubclass(hint, schema.Section)):
            return False
        kind = hint
    return True


def string_key_reads(source: str) -> list[str]:
    """Each read of a summary by key: summary[...] or summary.get(...) (sections too), a to_dict() or a section's
    extra read by key, and summary.json parsed beside its type, as 'line: code'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        target = None
        if isinstance(node, ast.Subscript):
            target = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            target = node.func.value
        elif isinstance(node, ast.Call) and ast.unparse(node.func) == "json.loads" and "summary" in ast.unparse(node):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        if target is None:
            continue
        names = chain(target)
        to_dict = isinstance(target, ast.Call) and isinstance(target.func, ast.Attribute) \
            and target.func.attr == "to_dict"
        extra = isinstance(target, ast.Attribute) and target.attr == "extra"
        if to_dict or extra or names is not None and is_section(names):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_code_outside_the_type_reads_a_summary_by_string_key():
    files = [p for p in ROOT.rglob("*.py") if not set(p.relative_to(ROOT).parts) & set(SKIPPED) and p != SCHEMA]
    assert len(files) > 100
    found = [f"{p.relative_to(ROOT)}:{line}" for p in files for line in string_key_reads(p.read_text())]
    assert found == [], "read these through metrics.summary.schema.Summary's attributes:\n" + "\n".join(found)


def test_the_check_sees_each_way_of_reading_by_key():
    reads = '''
summary["status"]
run.summary.get("wall_s")
first_summary["config"]
r.summary.link["faithful"]
s.summary.network.efficiency.get("efficiency")
run.summary.to_dict()["status"]
run.summary.shape.extra["cpus_asked"]
json.loads((path / "summary.json").read_text())
json.loads(RunDir(d).summary.read_text())
'''
    assert len(string_key_reads(reads)) == 9
    allowed = '''
run.summary.config["peers"]
summary.time_breakdown_share.get("comm_s")
summary.peers[0]
summaries[0]
rows["summary"]
json.loads(path.read_text())
'''
    assert string_key_reads(allowed) == []
