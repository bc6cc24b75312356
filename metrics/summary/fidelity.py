"""Whether a run held the setting it emulates: each figure that failed, from summary.json's link and isolation
sections (null, not judged, is no objection). The report leaves such runs out of its claims, the projection refuses
them as calibration, and the validation benchmark does not count them."""


def unfaithful(summary: dict) -> list[str]:
    """Why the run is not faithful, one line per failed figure (empty: faithful or unchecked)."""
    found = []
    isolation, link = summary.get("isolation") or {}, summary.get("link") or {}
    if isolation.get("faithful") is False:
        found.append("isolation: " + ("; ".join(isolation.get("unfaithful") or []) or "not faithful"))
    if link.get("faithful") is False:
        measured = link.get("goodput_mbit") is not None and link.get("nominal_mbit")
        found.append("link: " + (f"{link.get('worst_direction') or 'its worst direction'} carried "
                                 f"{link['goodput_mbit']:.3g} of {link['nominal_mbit']:.3g} Mbit/s "
                                 f"({link['goodput_mbit'] / link['nominal_mbit']:.0%}) while busy" if measured
                                 else link.get("reason") or "not faithful"))
    if isolation.get("dilation_unchecked"):
        found.append(f"dilation: {isolation['dilation']:g} is above the factor checked on this machine (summary.json "
                     "isolation.dilation_unchecked; bench/emulation.py)")
    return found
