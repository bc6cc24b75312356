"""bench/results.json moves between machines: no absolute path, every entry (and every row or family measured apart)
dated and with a machine fingerprint, and the sweeps it rests on named, either kept as a summary or marked not kept."""
import json
import re
from pathlib import Path

import pytest

from bench.run import ROOT, portable, recorded
from metrics.recording.machine import FINGERPRINT, UNKNOWN, describe_machine, fingerprint as machine

RESULTS = ROOT / "bench" / "results.json"
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}( \d{2}:\d{2}:\d{2})?$")
ENTRIES = json.loads(RESULTS.read_text())["results"]


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
    result = recorded({"name": "x", "rows": [{"measured_at": "now", "dir": str(ROOT / "multirun" / "s" / "run1")}],
                       "outside": "/tmp/elsewhere/run2"})
    assert result["rows"][0]["dir"] == "multirun/s/run1"
    assert result["outside"] == "outside the repository: run2"
    assert result["sweeps"] == [] and DATE.match(result["measured_at"])
    assert result["rows"][0]["machine"] == result["machine"] and not fingerprint_problems(result["machine"])
    assert portable({"a": ["/tmp/x y"]}) == {"a": ["/tmp/x y"]}  # prose with spaces is not a path
