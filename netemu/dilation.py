"""Time dilation (DieCast): emulate.dilation=k runs the emulated cluster k times slower in every respect.

Every peer gets peer_cpus/k CPU (netemu/cpu.py), and one rule by name rewrites the config
before the peers read it: link rates (knobs ending in _mbit, and network.per_peer) / k, and
every time knob (ending in _s, _ms, _us, _time, _timeout: timeouts, latencies, hivemind's
matchmaking and timeouts, fault stalls, ...) x k, so a knob added later is scaled without code
changes. The emulate block itself is not scaled. The summary converts reported times back.
The guest clock is not dilated: what runs on the kernel's own timers is not (see docs/emulation.md).
"""
from omegaconf import OmegaConf

from metrics.recording.units import RATE_SUFFIXES, TIME_SUFFIXES

RATE_LISTS = ("per_peer",)  # lists of link rates by rank (network.per_peer)
NOT_DILATED = ("emulate",)  # top-level blocks left as they are


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def dilated_knobs(config: dict, k: float, prefix: str = "") -> dict[str, tuple]:
    """Dotted knob path -> (value, dilated value) for every time and rate knob of a resolved config."""
    changes = {}
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


def dilate(cfg, k: float) -> dict[str, tuple]:
    """Rewrite cfg in place for dilation factor k; returns what changed (path -> (before, after))."""
    if k == 1:
        return {}
    changes = dilated_knobs(OmegaConf.to_container(cfg, resolve=True), k)
    for path, (_, value) in changes.items():  # all computed from the resolved values first: none twice
        OmegaConf.update(cfg, path, value, merge=False)
    return changes
