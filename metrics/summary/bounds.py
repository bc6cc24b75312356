"""Link floors no run can beat and link efficiency = floor / measured time (methods.yaml network.efficiency)."""
from collections.abc import Callable
from dataclasses import dataclass, field

from metrics.summary.schema import Json

MBIT = 1e6 / 8  # bytes/s per Mbit/s
ETHERNET_MTU = 1500  # standard Ethernet's frame size (bytes, the largest IP packet): a target link's unless told


@dataclass
class Round:
    payload: float       # P: the largest payload one worker sent or received in the round, bytes
    workers: int         # N
    rate: float          # B: the slowest worker link, bytes/s per direction (full duplex)
    knobs: dict = field(default_factory=dict)  # the strategy's knobs (Strategy.knobs)
    uniform_links: bool = True                 # every process's link has the same rate


@dataclass(frozen=True)
class LinkBound:
    """The strategy's knobs and its link floor: bound (CostModel.link_bound), its formula text, rounds_overlap."""
    knobs: dict = field(default_factory=dict)
    bound: Callable[[Round], float | None] | None = None
    formula: str | None = None
    rounds_overlap: bool = False


def round_records(steps_by_rank: dict[int, list[dict]]) -> dict[tuple, list[dict]]:
    """Step records that moved payload, by averaging round: ("round", the step's `round`), else ("step", its step)."""
    rounds: dict[tuple, list[dict]] = {}
    for rank, steps in steps_by_rank.items():
        before = 0
        for s in steps:
            if s["bytes_sent"] or s["bytes_recv"]:
                key = s.get("round")
                record = s | {"rank": rank, "samples_in_step": s["samples"] - before}
                rounds.setdefault(("step", s["step"]) if key is None else ("round", key), []).append(record)
            before = s["samples"]
    return rounds


def round_link_time(record: dict) -> float:
    """A worker's communication time in a step: the strategy's `link_s` where it times its transfers, else comm_s."""
    link = record.get("link_s")
    return record["comm_s"] if link is None else link


def link_loads(records: list[dict]) -> dict[int, list[float]]:
    """rank -> [bytes out, bytes in] its link carried over these records (servers from the workers' peer_bytes)."""
    loads: dict[int, list[float]] = {}
    for r in records:
        own = loads.setdefault(r["rank"], [0.0, 0.0])
        own[0] += r["bytes_sent"]
        own[1] += r["bytes_recv"]
        for peer, (sent_to, received_from) in (r.get("peer_bytes") or {}).items():
            other = loads.setdefault(int(peer), [0.0, 0.0])
            other[0] += received_from
            other[1] += sent_to
    return loads


def floor_s(records: list[dict], rates: list[float | None]) -> tuple[float, int | None]:
    """(seconds, rank): the busiest link's time, the larger direction's bytes over its own rate (bytes/s)."""
    times = {rank: max(out, into) / rate for rank, (out, into) in link_loads(records).items()
             if rank < len(rates) and (rate := rates[rank])}
    if not times:  # only unshaped links carried these bytes
        return 0.0, None
    rank = max(times, key=times.__getitem__)
    return times[rank], rank


def idle_s(records: list[dict]) -> float:
    """Time inside the round's communication during which no link carries its bytes (the least any worker saw)."""
    return min(r.get("link_idle_s") or 0.0 for r in records)


def span(records: list[dict]) -> tuple[float, float]:
    """(start, end) in absolute seconds: the earliest communication start and the latest step end."""
    starts = [r["ended_at"] - r["opt_s"] - max(r["comm_s"], r.get("link_s") or 0.0) for r in records]
    return min(starts), max(r["ended_at"] for r in records)


def link_efficiency(strategy: LinkBound, steps_by_rank: dict[int, list[dict]], rates_mbit: list[float | None]) -> dict:
    """Each round's floor (the run's, if rounds overlap) against measured time (methods.yaml network.efficiency)."""
    if not steps_by_rank:
        return {"bound": None, "why": "no steps were logged"}
    rates = [None if m is None else m * MBIT for m in rates_mbit]
    if not any(rates):
        return {"bound": None, "why": "no link is shaped (no bandwidth), so no floor"}
    rounds = round_records(steps_by_rank)
    keys = sorted(rounds)[1:]  # round 1 sets up connections
    if not keys:
        return {"bound": None, "why": "fewer than 2 averaging rounds"}
    result: Json = {"method": "overlapping rounds: busiest link over the span of rounds 2..R" if strategy.rounds_overlap
              else "synchronous rounds: per round, busiest link / the longest worker's link time",
              "link_mbit_by_rank": rates_mbit, "rounds": len(keys)}
    if strategy.rounds_overlap:
        records = [r for k in keys for r in rounds[k]]
        floor, busiest = floor_s(records, rates)
        start, end = span(records)
        measured = end - start - sum(idle_s(rounds[k]) for k in keys)
        samples = sum(r["samples_in_step"] for r in records)
        result["throughput_bound_samples_per_s"] = samples / floor if floor else None
    else:
        floors = [floor_s(rounds[k], rates) for k in keys]
        floor, busiest = sum(f for f, _ in floors), max(floors, key=lambda f: f[0])[1]
        measured = sum(max(round_link_time(r) for r in rounds[k]) - idle_s(rounds[k]) for k in keys)
    return result | {"floor_s": floor, "measured_s": measured, "busiest_link_rank": busiest,
                     "bound_s_per_round": floor / len(keys), "measured_s_per_round": measured / len(keys),
                     "efficiency": floor / measured if measured > 0 else None,
                     "isolated_round": isolated_round(strategy, rounds, keys, len(steps_by_rank), rates)}


def isolated_round(strategy: LinkBound, rounds: dict[tuple, list[dict]], keys: list[tuple], workers: int,
                   rates: list[float | None]) -> dict | None:
    """The strategy's latency of one round alone on equal links (Strategy.link_bound); no floor if rounds overlap."""
    worker_rates = [rate for rate in rates[:workers] if rate is not None]
    if strategy.bound is None or strategy.formula is None or None in rates or not worker_rates:
        return None
    total = 0.0
    for k in keys:
        payload = max(max(r["bytes_sent"], r["bytes_recv"]) for r in rounds[k])
        seconds = strategy.bound(Round(payload, workers, min(worker_rates), strategy.knobs, len(set(rates)) == 1))
        if seconds is None:
            return {"formula": strategy.formula, "why": "the strategy's formula does not cover these links"}
        total += seconds
    return {"formula": strategy.formula, "latency_s_per_round": total / len(keys),
            "note": "latency of one round in isolation (equal links, the slowest worker link); rounds that "
                    "overlap may take less"}
