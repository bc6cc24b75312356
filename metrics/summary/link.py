"""summary.json's "link": the link the run measured (link.json) and whether it held its rate (link_meter.json)."""
import json
from pathlib import Path

from metrics.recording.rundir import RunDir
from metrics.recording.methods import methods

FAITHFUL_SHARE = 0.9       # faithful: goodput while busy >= this share of the nominal rate
MIN_BUSY_INTERVALS = 30    # a direction is judged once it had this many busy intervals
ONLY_COMPUTE_DIFFERS = "on loopback strategies differ only by their compute share"  # the run's first line, the verdict

METHODS = methods("link", FAITHFUL_SHARE=FAITHFUL_SHARE, MIN_BUSY_INTERVALS=MIN_BUSY_INTERVALS)


def goodput_mbit(tally: dict) -> float | None:
    """Mbit/s a direction carried while busy (None: never busy)."""
    return tally["busy_bytes"] * 8 / tally["busy_s"] / 1e6 if tally["busy_s"] > 0 else None


def direction_name(tally: dict) -> str:
    return f"host {tally['host']} {tally['direction']}"


def judge(tallies: list[dict]) -> dict:
    """The verdict of the direction with MIN_BUSY_INTERVALS busy intervals or more that did worst against its rate
    (faithful None: none had that many; a meter from before busy_intervals were counted is not judged)."""
    judged = [t for t in tallies if t.get("busy_intervals", 0) >= MIN_BUSY_INTERVALS]
    nominal = min((t["nominal_mbit"] for t in tallies), default=None)
    if not judged:
        most = max((t.get("busy_intervals", 0) for t in tallies), default=0)
        return {"nominal_mbit": nominal, "goodput_mbit": None, "goodput_share": None,
                "busy_s": max((t["busy_s"] for t in tallies), default=0.0), "busy_intervals": most,
                "worst_direction": None, "faithful": None,
                "reason": f"no direction had {MIN_BUSY_INTERVALS} busy intervals (most: {most}): the link was never "
                          "the bottleneck often enough to check its rate"}
    worst = min(judged, key=lambda t: goodput_mbit(t) / t["nominal_mbit"])
    goodput = goodput_mbit(worst)
    share = goodput / worst["nominal_mbit"]
    faithful = share >= FAITHFUL_SHARE
    verdict = "held" if faithful else "did not hold"
    return {"nominal_mbit": worst["nominal_mbit"], "goodput_mbit": goodput, "goodput_share": share,
            "busy_s": worst["busy_s"], "busy_intervals": worst["busy_intervals"], "worst_direction": direction_name(worst),
            "faithful": faithful,
            "reason": f"{direction_name(worst)} carried {goodput:.1f} of its {worst['nominal_mbit']:g} Mbit/s "
                      f"({share:.0%}) in {worst['busy_intervals']} intervals its queue outlasted "
                      f"({worst['busy_s']:.2f} s): the link {verdict} (faithful from {FAITHFUL_SHARE:.0%}; worst of "
                      f"{len(judged)} directions with >= {MIN_BUSY_INTERVALS} such intervals)"}


def read_json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def link_section(run: RunDir, config: dict) -> dict:
    choice = read_json(run.link)
    if choice is None:  # a run from before the link was recorded: what its config says
        name = config["network"]["name"]
        return {"kind": name, "asked": name, "faithful": None, "reason": "not recorded (an older run)"}
    section = {"kind": choice["kind"], "asked": choice["asked"], "scope": choice["scope"],
               "hosts": choice["processes"] if choice["kind"] == "emulated" else None,
               "latency_ms": choice["latency_ms"], "mtu": choice.get("mtu"), "nominal_mbit": None, "goodput_mbit": None,
               "goodput_share": None, "busy_s": None, "busy_intervals": None, "worst_direction": None, "faithful": None,
               "reason": choice["reason"]}
    if choice["kind"] != "emulated":
        return section
    meter = read_json(run.link_meter)
    if meter is None or meter["error"]:
        return section | {"reason": (meter or {}).get("error") or "the links' counters were not read"}
    directions = [d | {"goodput_mbit": goodput_mbit(d)} for d in meter["directions"]]
    if not directions:
        return section | {"reason": "unshaped links: no rate to hold", "by_direction": []}
    return section | judge(meter["directions"]) | {"by_direction": directions}
