"""summary.json's `machine`: how busy the machine was around the run (metrics/recording/machine.py's samples)."""
import statistics
from pathlib import Path

from metrics.recording.jsonl import read_jsonl
from metrics.recording.machine import fingerprint
from metrics.recording.methods import methods

ALONE_OTHER_CPU_SHARE = 0.05  # the `alone` rule: others used at most 5 % of the cores' time ...
ALONE_STEAL_SHARE = 0.01      # ... the hypervisor took at most 1 % ...; and no other process held the machine lock

METHODS = methods("machine", ALONE_OTHER_CPU_SHARE=ALONE_OTHER_CPU_SHARE, ALONE_STEAL_SHARE=ALONE_STEAL_SHARE)


def machine_section(samples_path: Path, cores: int, lock: dict | None) -> dict:
    """summary.json `machine`: the machine over the run, from its samples (see METHODS['machine'])."""
    samples = read_jsonl(samples_path)
    section = {"cores": cores, "fingerprint": fingerprint(), "cpu_pressure_share": None, "steal_share": None,
               "load_mean": None, "load_max": None,
               "other_cpu_share": None, "alone": None, "lock": lock, "sampled_s": 0.0, "samples": len(samples)}
    if len(samples) < 2:
        return section
    first, last = samples[0], samples[-1]
    wall = last["t"] - first["t"]
    if wall <= 0:
        return section

    def delta(key: str) -> float:
        return last[key] - first[key]

    others = max(0.0, (delta("busy_s") - delta("run_cpu_s")) / (cores * wall))
    steal = delta("steal_s") / delta("all_s") if delta("all_s") > 0 else None
    loads = [s["load1"] for s in samples]
    lock_elsewhere = bool(lock and lock.get("holder") and not lock.get("under_lock"))
    section |= {
        "cpu_pressure_share": delta("psi_some_us") / 1e6 / wall if first["psi_some_us"] is not None else None,
        "steal_share": steal,
        "load_mean": statistics.fmean(loads),
        "load_max": max(loads),
        "other_cpu_share": others,
        "alone": others <= ALONE_OTHER_CPU_SHARE and (steal or 0.0) <= ALONE_STEAL_SHARE and not lock_elsewhere,
        "sampled_s": wall,
    }
    return section
