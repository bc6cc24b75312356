"""The verdict's network lines per section: each configuration's link (summary.json `link`), its goodput while busy,
and each configuration's communication share of a step, as the median over runs with its range."""
from metrics.summary.link import ONLY_COMPUTE_DIFFERS
from metrics.summary.schema import Link
from metrics.report.formats import counted, median_text, number, rounded_percent
from metrics.report.runs import Group, Run
from metrics.recording.methods import methods

GOODPUT_METHOD = methods("links")["method"]
COMM_SHARE = ("Communication's share of a step (time_breakdown_share.comm_s: measured communication, 0 in a step that "
              "sent and received nothing, / the mean step over all workers, one definition for every strategy; "
              "waiting: wait_s, the training thread's waits for a CPU that other processes took and the rest of a step "
              "that did not communicate; median over runs)")


def nominal_text(link: Link) -> str:
    """The link's nominal rate per direction: its directions' (by_direction), else the one it was judged on."""
    directions = link.by_direction
    if directions == []:
        return "unshaped (the kernel's veth speed)"
    rates = sorted({d["nominal_mbit"] for d in directions or []}) or ([link.nominal_mbit] if link.nominal_mbit else [])
    if not rates:
        return f"rate not recorded ({link.reason or 'the links were not metered'})"
    rate = f"{number(rates[0])} Mbit/s" if len(rates) == 1 else \
        f"{number(rates[0])}–{number(rates[-1])} Mbit/s by host and direction"
    return f"{rate} nominal each way"


def link_text(link: Link) -> str:
    """The link a run measured, in words: kind, nominal rate per direction, one per host or a shared loopback."""
    kind = link.kind
    if kind is None:
        return "not recorded (runs from before the link was recorded)"
    if link.scope is None:
        return f"network={kind}, {link.reason or 'not recorded'}"
    if kind == "none":
        return "none (one process)"
    if kind == "hosts":
        return "the machines' own network (launch.nnodes > 1), neither shaped nor metered"
    if kind == "loopback":
        return f"this machine's loopback, shared by all processes and unshaped: {ONLY_COMPUTE_DIFFERS}"
    latency = f", {number(link.latency_ms)} ms added one-way latency" if link.latency_ms else ""
    frames = f" in {link.mtu}-byte frames" if link.mtu else ""
    return f"{kind}, one link per host, {nominal_text(link)}{frames}{latency}"


def goodput_text(runs: list[Run]) -> str:
    measured = [r.link.goodput_mbit for r in runs if r.link.goodput_mbit is not None]
    if not measured:
        return (" Goodput while busy: not measured (no direction was busy often enough to judge its rate, or the "
                "links were not metered).")
    unjudged = len(runs) - len(measured)
    return (f" Goodput while busy: {median_text(measured, number, ' Mbit/s')}"
            + (f", not judged in {unjudged} of {counted(len(runs), 'run')}" if unjudged else "")
            + f"; {GOODPUT_METHOD}.")


def link_lines(groups: list[Group]) -> list[str]:
    """One line per distinct link among the groups' runs: the configurations on it and, if emulated, its goodput."""
    on_link: dict[str, dict[Group, list[Run]]] = {}
    for group in groups:
        for run in group.runs:
            on_link.setdefault(link_text(run.link), {}).setdefault(group, []).append(run)
    lines = []
    for text, by_group in on_link.items():
        runs = [r for found in by_group.values() for r in found]
        line = f"Link of {', '.join(g.label for g in by_group)} ({counted(len(runs), 'run')}): {text}."
        if any(r.link.kind == "emulated" for r in runs):
            line += goodput_text(runs)
        lines.append(line)
    return lines


def comm_share_line(groups: list[Group]) -> str:
    """Every configuration's communication and waiting shares of a step, the median over its runs with the range."""
    parts = []
    for group in groups:
        comm, wait = ([v for r in group.runs if (v := (r.summary.time_breakdown_share or {}).get(p)) is not None]
                      for p in ("comm_s", "wait_s"))
        parts.append(f"{group.label} {median_text(comm, rounded_percent, '%') if comm else 'not recorded'}"
                     + (f", waiting {median_text(wait, rounded_percent, '%')}" if wait else ""))
    return f"{COMM_SHARE}: {'; '.join(parts)}."


def network_lines(groups: list[Group]) -> list[str]:
    return [*link_lines(groups), comm_share_line(groups)] if groups else []
