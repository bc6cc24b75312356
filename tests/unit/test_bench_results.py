"""The benchmarks' results, one file per entry (bench/results.py): every stored file follows the schema, is written
as the API writes it, and moves between machines: no absolute path, every entry (and every row or family measured
apart) dated and with a machine fingerprint, and the sweeps it rests on named, either kept as a summary or marked
not kept. Nothing reads or writes a single results file any more."""
import json
import re
import subprocess
from pathlib import Path

import pytest

from bench.results import (COMMIT, RESULTS, ROOT, SCHEMA_PATH, BenchResult, MalformedEntry, load, load_all, portable,
                           recorded, save)
from metrics.recording.machine import FINGERPRINT, UNKNOWN, describe_machine, fingerprint as machine

DATE = re.compile(r"^\d{4}-\d{2}-\d{2}( \d{2}:\d{2}:\d{2})?$")
ENTRIES = [e.json() for e in load_all().values()]
CODE = ("bench", "docs", "hydra_plugins", "job", "launchers", "metrics", "netemu", "scripts", "strategies")
FILES = sorted(p for p in RESULTS.glob("*.json") if p != SCHEMA_PATH)
# HEAD as git says it, asked while the tests are collected (a unit test starts no process); None without git
HEAD = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip() \
    or None


def walk(value, path=""):
    """(path, value) of every dict, list item and leaf below value."""
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from walk(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from walk(item, f"{path}[{i}]")


def fingerprint_problems(fingerprint) -> list[str]:
    if not isinstance(fingerprint, dict):
        return [f"machine is {fingerprint!r}, not a fingerprint"]
    return [f"machine lacks {key} (give it, or {UNKNOWN!r})" for key in FINGERPRINT if key not in fingerprint]


def at(entry: dict, dotted: str):
    value = entry
    for key in dotted.split("."):
        value = value[int(key)] if isinstance(value, list) else value[key]
    return value


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["name"] for e in ENTRIES])
def test_no_absolute_path(entry):
    absolute = [f"{path}: {value}" for path, value in walk(entry)
                if isinstance(value, str) and (value.startswith("/") and " " not in value or "/work/" in value)]
    assert not absolute, absolute


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["name"] for e in ENTRIES])
def test_every_entry_and_part_measured_apart_has_its_date_and_machine(entry):
    assert DATE.match(entry.get("measured_at", "")), "an entry needs measured_at"
    if len(entry["measured_at"]) == len("2026-11-22"):
        assert entry.get("measured_at_note"), "a date without its time says why"
    problems = []
    for path, value in walk(entry):
        if isinstance(value, dict) and "measured_at" in value:
            if not DATE.match(str(value["measured_at"])):
                problems.append(f"{path or 'entry'}: measured_at {value['measured_at']!r}")
            problems += [f"{path or 'entry'}: {p}" for p in fingerprint_problems(value.get("machine"))]
    assert not problems, problems


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["name"] for e in ENTRIES])
def test_the_sweeps_an_entry_rests_on_are_named(entry):
    """Each sweep: a relative path, either kept in the repository or not kept with the key of this entry that holds
    its summary; every run folder the entry names lies under one of them."""
    sweeps = entry.get("sweeps")
    assert isinstance(sweeps, list), "sweeps: a list (empty when the benchmark's runs were temporary)"
    for sweep in sweeps:
        assert not sweep["path"].startswith("/") and ".." not in Path(sweep["path"]).parts
        if sweep["kept"]:
            assert (ROOT / sweep["path"]).exists(), f"{sweep['path']} is said to be kept"
        else:
            assert at(entry, sweep["summary"]), f"{sweep['path']}: no summary at {sweep['summary']}"
    named = [value for _, value in walk(entry) if isinstance(value, str) and value.startswith(("multirun/", "outputs/"))]
    for path in named:
        assert any(path == s["path"] or path.startswith(s["path"] + "/") for s in sweeps), f"{path}: not a named sweep"


def test_the_fingerprint_is_this_machines():
    found = machine()
    assert not fingerprint_problems(found)
    cpuinfo = Path("/proc/cpuinfo").read_text()
    if "vendor_id" in cpuinfo:
        assert found["cpu_vendor"] in cpuinfo and found["cpu_model_name"] in cpuinfo
        assert re.search(rf"cpu family\s*:\s*{found['cpu_family']}\n", cpuinfo)
    assert found["kernel"] == Path("/proc/sys/kernel/osrelease").read_text().strip()
    assert found["memory_gib"] > 0 and found["cores"] >= 1
    assert "not recorded" not in describe_machine(found) or UNKNOWN in found.values()


def test_an_unknown_field_is_named_as_such():
    partial = dict.fromkeys(FINGERPRINT, UNKNOWN) | {"cpu_model_name": "AMD EPYC", "cores": 2}
    assert describe_machine(partial).startswith("AMD EPYC, 2 cores (not recorded: vendor, family, model, clock,")


def test_a_new_result_is_saved_portable_dated_and_fingerprinted():
    result = recorded({"name": "x", "goal": "none",
                       "rows": [{"measured_at": "now", "dir": str(ROOT / "multirun" / "s" / "run1")}],
                       "outside": "/tmp/elsewhere/run2"}).json()
    assert result["rows"][0]["dir"] == "multirun/s/run1"
    assert result["outside"] == "outside the repository: run2"
    assert result["sweeps"] == [] and DATE.match(result["measured_at"])
    assert result["rows"][0]["machine"] == result["machine"] and not fingerprint_problems(result["machine"])
    assert portable({"a": ["/tmp/x y"]}) == {"a": ["/tmp/x y"]}  # prose with spaces is not a path


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_stored_file_follows_the_schema_and_is_written_as_the_api_writes_it(path, tmp_path):
    """Loaded into its envelope and body, and saved again, byte for byte the file (its keys in their order)."""
    entry = load(path.stem)
    assert entry.name == path.stem and not set(entry.body) & {"name", "goal", "goal_met", "measured_at", "commit"}
    assert save(entry, tmp_path, new=False).read_bytes() == path.read_bytes(), \
        f"{path.name}: not as bench/results.py writes it"


def entry(name: str = "probe", **more) -> BenchResult:
    return BenchResult.of({"name": name, "ratio": 1.5, "goal": "none", "setup": "a test",
                           "measured_at": "2026-11-29 06:00:00", "machine": machine(), "sweeps": [],
                           "rows": [{"x": 1.25, "label": "÷"}]} | more)


def test_an_entry_saved_is_loaded_the_same(tmp_path):
    saved = entry()
    path = save(saved, tmp_path)
    assert path == tmp_path / "probe.json"
    assert load("probe", tmp_path) == BenchResult.of(saved.json() | {"commit": COMMIT})
    assert list(json.loads(path.read_text()))[-2:] == ["rows", "commit"]  # a field it lacked: written last
    assert load("other", tmp_path) is None
    save(entry("earlier", measured_at="2026-11-28"), tmp_path)
    assert list(load_all(tmp_path)) == ["earlier", "probe"]  # in the order they were measured
    save(entry(ratio=2.0), tmp_path)  # replaces
    assert load("probe", tmp_path).body["ratio"] == 2.0 and len(list(tmp_path.glob("*.json"))) == 2


def test_a_new_result_records_the_commit_it_ran_at(tmp_path):
    """HEAD and whether tracked files differed from it (the results saving writes aside), as the module loaded; an
    entry written back as it was keeps what it had."""
    if HEAD is None:
        pytest.skip("no git checkout here: COMMIT is None")
    save(entry(), tmp_path)
    assert load("probe", tmp_path).commit == COMMIT and COMMIT["sha"] == HEAD
    assert isinstance(COMMIT["dirty"], bool)
    save(entry("old"), tmp_path, new=False)
    assert "commit" not in load("old", tmp_path).keys
    with pytest.raises(MalformedEntry, match="entry.commit.sha 'HEAD' does not match"):
        save(entry(commit={"sha": "HEAD", "dirty": False}), tmp_path, new=False)


@pytest.mark.parametrize("broken, says", [
    ({"ratio": "fast"}, "entry.ratio is str 'fast', not number or null"),
    ({"machine": "my laptop"}, "entry.machine is str 'my laptop', not object"),
    ({"measured_at": "yesterday"}, "entry.measured_at 'yesterday' does not match"),
    ({"sweeps": [{"path": "multirun/x"}]}, "entry.sweeps[0].kept is missing"),
    ({"goal": None}, "entry.goal is NoneType None, not string"),
])
def test_a_malformed_entry_is_refused_in_one_line_naming_its_file_and_field(tmp_path, broken, says):
    with pytest.raises(MalformedEntry) as refused:
        save(entry(**broken), tmp_path)
    assert str(refused.value).startswith(f"{tmp_path / 'probe.json'}: {says}") and "\n" not in str(refused.value)
    assert not (tmp_path / "probe.json").exists()
    (tmp_path / "probe.json").write_text(json.dumps({k: v for k, v in entry().json().items() if k != "goal"}))
    with pytest.raises(MalformedEntry, match=r"probe.json: entry.goal is missing$"):
        load("probe", tmp_path)
    (tmp_path / "probe.json").write_text(json.dumps(entry("another").json()))
    with pytest.raises(MalformedEntry, match="entry.name is 'another', not the file's name 'probe'"):
        load_all(tmp_path)


def test_nothing_reads_or_writes_a_single_results_file():
    """The record is bench/results/, read and written through bench/results.py only."""
    assert not (ROOT / "bench" / "results.json").exists()
    code = [ROOT / "Makefile", ROOT / "pyproject.toml", *ROOT.glob("*.py"), *(ROOT / "conf").rglob("*.yaml"),
            *(path for folder in CODE for path in (ROOT / folder).rglob("*.py"))]
    naming = [str(path.relative_to(ROOT)) for path in code if "bench/results.json" in path.read_text()]
    assert not naming, f"these name the single results file that is gone (use bench/results.py): {naming}"
    by_hand = [str(path.relative_to(ROOT)) for path in code if path != ROOT / "bench" / "results.py"
               and re.search(r'/ "results"|"results\.json"', path.read_text())]
    assert not by_hand, f"these build a path into bench/results themselves (use bench/results.py): {by_hand}"
