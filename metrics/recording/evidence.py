"""conf/evidence.json: the benchmark entries runs and projections read (ENTRIES), as bench/results.py saves them."""
import json
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EVIDENCE = ROOT / "conf" / "evidence.json"
ENTRIES = ("emulation", "link_goodput", "projection_validation", "noise_scale", "primary_noise")
VALIDATION = ("name", "goal", "verdicts", "held_out", "coverage", "setup", "measured_at", "machine")
VALIDATION_CASE = ("strategy", "peers", "link_mbit", "latency_ms", "error", "role", "counted", "wire_over_compute",
                   "size_bytes")


def evidence_entry(entry: dict) -> dict:
    """What the evidence keeps of an entry: all of it; of the projection's, only the counted held-out cases."""
    if entry["name"] != "projection_validation":
        return entry
    cases = [{k: r.get(k) for k in VALIDATION_CASE} for r in entry.get("rows", [])
             if r.get("role") == "held-out" and r.get("counted")]
    return {k: entry[k] for k in VALIDATION if k in entry} | {"rows": cases}


def refresh_evidence(entries: Iterable[dict], evidence: Path | None = None) -> None:
    """Copy the evidence entries among these benchmark entries into the evidence file (default EVIDENCE)."""
    evidence = evidence or EVIDENCE
    recorded = {e["name"]: e for e in entries if e["name"] in ENTRIES}
    kept = json.loads(evidence.read_text())["results"] if evidence.exists() else []
    entries = [e for e in kept if e["name"] not in recorded] + [evidence_entry(e) for e in recorded.values()]
    evidence.write_text(json.dumps({"results": sorted(entries, key=lambda e: ENTRIES.index(e["name"]))},
                                   indent=1) + "\n")
