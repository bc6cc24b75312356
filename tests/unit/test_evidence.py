"""The evidence file (conf/evidence.json): what a run and a projection read instead of bench/, kept equal to the
benchmarks' record by the benchmarks that write it."""
import json
from pathlib import Path

import pytest

from bench import results
from bench.results import BenchResult, load_all, save
from helpers import compose_config
from launchers.sweeper import ROOT
from metrics.projection.evidence import load_evidence
from metrics.recording import evidence
from metrics.recording.evidence import ENTRIES, EVIDENCE, refresh_evidence
from metrics.recording.machine import fingerprint
from netemu.dilation import checked_dilation

pytestmark = pytest.mark.timeout(60)


def test_the_shipped_evidence_is_the_records_evidence(tmp_path):
    refresh_evidence([e.json() for e in load_all().values()], tmp_path / "evidence.json")
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
    assert 0.5 < found.payload_shares[1500] < found.payload_shares[9000] < 1 and found.validations  # per frame size
    checked_dilation("ring")
    assert ROOT / compose_config().report.noise_results == EVIDENCE
    assert EVIDENCE.resolve() in opened and not any("bench" in path.parts for path in opened), opened


def test_a_benchmark_saving_its_record_refreshes_the_evidence_and_nothing_else_does(tmp_path, monkeypatch):
    record, kept = tmp_path / "results", tmp_path / "evidence.json"
    monkeypatch.setattr(results, "RESULTS", record)
    monkeypatch.setattr(evidence, "EVIDENCE", kept)
    dated = {"goal": "g", "measured_at": "2026-11-29 06:00:00", "machine": fingerprint(), "sweeps": []}
    validation = dated | {"name": "projection_validation", "verdicts": {"ring": {"met": True}}, "not_counted": ["big"],
                          "rows": [{"strategy": "ring", "peers": 4, "link_mbit": 20, "latency_ms": 0, "error": 0.05,
                                    "role": "held-out", "counted": True, "wire_over_compute": 80.0,
                                    "size_bytes": 1e6, "log": "..."},
                                   {"strategy": "ring", "peers": 2, "role": "calibration", "counted": True}]}
    save(BenchResult.of(dated | {"name": "link_goodput", "payload_share": 0.9}), tmp_path / "other")
    assert not kept.exists()  # another results folder is no record
    for entry in (dated | {"name": "link_goodput", "payload_share": 0.9}, validation, dated | {"name": "headline"}):
        save(BenchResult.of(entry), record)
    entries = {e["name"]: e for e in json.loads(kept.read_text())["results"]}
    assert sorted(entries) == ["link_goodput", "projection_validation"]  # the headline is no evidence
    assert entries["projection_validation"] == {
        "name": "projection_validation", "goal": "g", "verdicts": {"ring": {"met": True}},
        "measured_at": dated["measured_at"], "machine": dated["machine"],
        "rows": [{"strategy": "ring", "peers": 4, "link_mbit": 20, "latency_ms": 0, "error": 0.05,
                  "role": "held-out", "counted": True, "wire_over_compute": 80.0, "size_bytes": 1e6}]}
    save(BenchResult.of(dated | {"name": "link_goodput", "payload_share": 0.8}), record)
    entries = {e["name"]: e for e in json.loads(kept.read_text())["results"]}
    assert entries["link_goodput"]["payload_share"] == 0.8 and "projection_validation" in entries
