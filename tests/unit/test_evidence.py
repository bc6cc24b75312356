"""The evidence file (conf/evidence.json): what a run and a projection read instead of bench/, kept equal to the
benchmarks' record by the benchmarks that write it."""
import json
from pathlib import Path

import pytest

from bench.run import save
from helpers import compose_config
from launchers.sweeper import ROOT
from metrics.projection.evidence import load_evidence
from metrics.recording import evidence
from metrics.recording.evidence import ENTRIES, EVIDENCE, RECORD, refresh_evidence, refresh_if_record
from netemu.dilation import checked_dilation

pytestmark = pytest.mark.timeout(60)


def test_the_shipped_evidence_is_the_records_evidence(tmp_path):
    refresh_evidence(RECORD, tmp_path / "evidence.json")
    assert json.loads((tmp_path / "evidence.json").read_text()) == json.loads(EVIDENCE.read_text())
    names = [e["name"] for e in json.loads(EVIDENCE.read_text())["results"]]
    assert names == list(ENTRIES)


def test_runs_and_projections_read_the_evidence_and_never_bench(monkeypatch):
    opened = []
    real_read_text = Path.read_text

    def read_text(path, *args, **kwargs):
        opened.append(path.resolve())
        return real_read_text(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    found = load_evidence()
    assert 0.5 < found.payload_share < 1 and found.validations
    checked_dilation("ring")
    assert ROOT / compose_config().report.noise_results == EVIDENCE
    assert EVIDENCE.resolve() in opened and not any("bench" in path.parts for path in opened), opened


def test_a_benchmark_saving_its_record_refreshes_the_evidence_and_nothing_else_does(tmp_path, monkeypatch):
    record, kept = tmp_path / "results.json", tmp_path / "evidence.json"
    monkeypatch.setattr(evidence, "RECORD", record)
    monkeypatch.setattr(evidence, "EVIDENCE", kept)
    validation = {"name": "projection_validation", "verdicts": {"ring": {"met": True}}, "not_counted": ["big"],
                  "rows": [{"strategy": "ring", "peers": 4, "link_mbit": 20, "latency_ms": 0, "error": 0.05,
                            "role": "held-out", "counted": True, "log": "..."},
                           {"strategy": "ring", "peers": 2, "role": "calibration", "counted": True}]}
    save(tmp_path / "other.json", [{"name": "link_goodput", "payload_share": 0.9}])
    assert not kept.exists()  # another results file is no record
    save(record, [{"name": "link_goodput", "payload_share": 0.9}, validation, {"name": "headline", "ratio": 2}])
    entries = {e["name"]: e for e in json.loads(kept.read_text())["results"]}
    assert sorted(entries) == ["link_goodput", "projection_validation"]  # the headline is no evidence
    assert entries["projection_validation"] == {
        "name": "projection_validation", "verdicts": {"ring": {"met": True}},
        "rows": [{"strategy": "ring", "peers": 4, "link_mbit": 20, "latency_ms": 0, "error": 0.05,
                  "role": "held-out", "counted": True}]}
    save(record, [{"name": "link_goodput", "payload_share": 0.8}])
    entries = {e["name"]: e for e in json.loads(kept.read_text())["results"]}
    assert entries["link_goodput"]["payload_share"] == 0.8 and "projection_validation" in entries
    refresh_if_record(tmp_path / "other.json")
    assert json.loads(kept.read_text())["results"] == list(entries.values())
