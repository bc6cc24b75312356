"""Time dilation (DieCast): emulate.dilation=k runs the emulated cluster k times slower. Every peer gets peer_cpus/k
CPU (netemu/cpu.py); `dilate` rewrites the config by knob name: rates (_mbit, network.per_peer) / k, times (_s, _ms,
...) x k, the emulate block left as it is (docs/emulation.md, Time dilation).
"""
import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from metrics.recording.evidence import EVIDENCE
from metrics.recording.machine import describe_machine, fingerprint, same_machine
from metrics.recording.units import RATE_SUFFIXES, TIME_SUFFIXES

RATE_LISTS = ("per_peer",)  # lists of link rates by rank (network.per_peer)
NOT_DILATED = ("emulate",)  # top-level blocks left as they are


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def dilated_knobs(config: dict[Any, Any], k: float, prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """Dotted knob path -> (value, dilated value) for every time and rate knob of a resolved config."""
    changes: dict[str, tuple[Any, Any]] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if path in NOT_DILATED:
            continue
        if isinstance(value, dict):
            changes |= dilated_knobs(value, k, f"{path}.")
        elif _number(value) and key.endswith(TIME_SUFFIXES):
            changes[path] = (value, value * k)
        elif _number(value) and key.endswith(RATE_SUFFIXES):
            changes[path] = (value, value / k)
        elif isinstance(value, list) and key in RATE_LISTS:
            changes[path] = (value, [v / k if _number(v) else v for v in value])
    return changes


def dilate(cfg: DictConfig, k: float) -> dict[str, tuple[Any, Any]]:
    """Rewrite cfg in place for dilation factor k; returns what changed (path -> (before, after))."""
    if k == 1:
        return {}
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(resolved, dict)  # a DictConfig's container
    changes = dilated_knobs(resolved, k)
    for path, (_, value) in changes.items():  # all computed from the resolved values first: none twice
        OmegaConf.update(cfg, path, value, merge=False)
    return changes


def checked_dilation(strategy: str, results: Path = EVIDENCE) -> tuple[float, str]:
    """The largest emulate.dilation a strategy is offered, and why: the factor bench/emulation.py checked for it on
    this machine (invariance and linearity); 1 where it was not checked here."""
    entries = json.loads(results.read_text())["results"] if results.exists() else []
    entry = next((e for e in entries if e.get("name") == "emulation"), None)
    if entry is None:
        return 1.0, f"no dilation check in {results} (python bench/run.py emulation)"
    if entry.get("caveats"):
        return 1.0, f"{results}'s dilation check has a caveat: {next(iter(entry['caveats'].values()))}"
    measured = f"bench/emulation.py on {describe_machine(entry['machine'])}, {entry['measured_at']}"
    if not same_machine(entry["machine"], fingerprint()):
        return 1.0, f"checked on another machine ({measured}); run python bench/run.py emulation here"
    if strategy not in entry["checked_dilation"]:
        return 1.0, f"{strategy} was not among the strategies checked ({measured})"
    invariance = (entry.get("invariance") or {}).get(strategy, {}).get("checked_dilation")
    return float(entry["checked_dilation"][strategy]), (f"{measured}: its invariance held up to {invariance}, a "
                                                        f"quota's linearity up to {entry.get('linearity_holds_up_to')}")
