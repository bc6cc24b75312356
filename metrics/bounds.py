"""Lower bounds on one averaging round over shaped links: the inputs, and link efficiency.

Each strategy states its own formula (Strategy.link_bound, derivation in its
docstring); this module only defines what the formula receives and how bounds and
measurements are set side by side. Framing and protocol overhead are not counted,
so a measured time can only be longer: every efficiency is at most 1.
"""
from dataclasses import dataclass, field

MBIT = 1e6 / 8  # bytes/s per Mbit/s


@dataclass
class Round:
    payload: float       # P: the largest payload one worker sent or received in the round, bytes
    workers: int         # N
    rate: float          # B: the slowest worker link, bytes/s per direction (full duplex)
    knobs: dict = field(default_factory=dict)  # the strategy's knobs (Strategy.knobs)
    uniform_links: bool = True                 # every process's link has the same rate


def round_records(steps_by_rank: dict[int, list[dict]]) -> dict[int, list[dict]]:
    """Step records that moved payload, grouped by averaging round (the step's `round`, else its step number)."""
    rounds: dict[int, list[dict]] = {}
    for steps in steps_by_rank.values():
        for s in steps:
            if s["bytes_sent"] or s["bytes_recv"]:
                key = s.get("round")
                rounds.setdefault(s["step"] if key is None else key, []).append(s)
    return rounds


def round_link_time(record: dict) -> float:
    """The time a worker's communication occupied in a step: the strategy's `link_s` where it
    overlaps communication with backward, else the step's exposed communication."""
    link = record.get("link_s")
    return record["comm_s"] if link is None else link


def link_efficiency(bound, formula: str | None, knobs: dict, steps_by_rank: dict[int, list[dict]],
                    rates_mbit: list[float | None]) -> dict:
    """Sum of per-round bounds / sum of per-round measured times (a round ends with its slowest worker)."""
    if bound is None or formula is None:
        return {"bound": None, "why": "this strategy states no lower-bound formula"}
    if not steps_by_rank:
        return {"bound": None, "why": "no steps were logged", "formula": formula}
    worker_rates = [rates_mbit[r] for r in steps_by_rank if r < len(rates_mbit)]
    if not worker_rates or None in rates_mbit:
        return {"bound": None, "why": "some links are not shaped (no bandwidth), so no bound", "formula": formula}
    rate = min(worker_rates) * MBIT
    uniform = len(set(rates_mbit)) == 1
    bound_s = measured_s = 0.0
    rounds = round_records(steps_by_rank)
    for records in rounds.values():
        payload = max(max(r["bytes_sent"], r["bytes_recv"]) for r in records)
        seconds = bound(Round(payload, len(steps_by_rank), rate, knobs, uniform))
        if seconds is None:
            return {"bound": None, "why": "the strategy's formula does not cover these links", "formula": formula}
        bound_s += seconds
        measured_s += max(round_link_time(r) for r in records)
    count = len(rounds)
    return {
        "formula": formula,
        "link_mbit": rate / MBIT,
        "rounds": count,
        "bound_s_per_round": bound_s / count if count else None,
        "measured_s_per_round": measured_s / count if count else None,
        "efficiency": bound_s / measured_s if measured_s else None,
    }
