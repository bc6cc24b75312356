"""Whether a run held the setting it emulates (summary.json link and isolation; null, not judged, is no objection)."""
from metrics.summary.schema import Summary


def unfaithful(summary: Summary) -> list[str]:
    """Why the run is not faithful, one line per failed figure (empty: faithful or unchecked)."""
    found = []
    isolation, link = summary.isolation, summary.link
    if isolation.faithful is False:
        found.append("isolation: " + ("; ".join(isolation.unfaithful or []) or "not faithful"))
    if link.faithful is False:
        goodput, nominal = link.goodput_mbit, link.nominal_mbit
        found.append("link: " + (f"{link.worst_direction or 'its worst direction'} carried {goodput:.3g} of "
                                 f"{nominal:.3g} Mbit/s ({goodput / nominal:.0%}) while busy"
                                 if goodput is not None and nominal else link.reason or "not faithful"))
    if isolation.dilation_unchecked:
        found.append(f"dilation: {isolation.dilation:g} is above the factor checked on this machine (summary.json "
                     "isolation.dilation_unchecked; bench/emulation.py)")
    return found
