"""summary.json's "isolation": each peer's CPU promised and got, whether the emulation held; dilated times undone."""
import json
import statistics
from typing import Any

from metrics.recording.rundir import RunDir
from metrics.recording.units import RATE_SUFFIXES as KNOB_RATE_SUFFIXES
from metrics.recording.units import TIME_SUFFIXES
from metrics.recording.methods import methods
from metrics.recording.steplog import PHASES
from metrics.summary.schema import Json

SHARE_TOLERANCE = 0.05  # a peer received its promise when received >= (1 - this) x promised
WAIT_TOLERANCE = 0.05   # run-queue delay beyond its own quota's, as a share of the peer's time in its group
OTHER_WORK_TOLERANCE = 0.05  # CPU time of other work on the peer's cores, as a share of its time in its group
DISTORTION_LIMIT = 0.10  # decides for ranks with steps: chosen by bench/emulation.py fidelity (its declared rule)

# a by_rank row: the peer's result.json cpu figures, in this order, the DERIVED ones computed here
ROW = ("quota_cpus", "quota_enforced", "in_group_s", "cpu_promised_s", "cpu_received_s", "received_share",
       "throttled_periods", "throttled_s", "runq_s", "wait_beyond_quota_s", "other_on_cores_s", "run_on_cores_s",
       "irq_on_cores_s", "distortion")
DERIVED = ("cpu_promised_s", "received_share", "wait_beyond_quota_s", "run_on_cores_s", "distortion")
METHODS = methods("isolation", RECEIVED_AT_LEAST=1 - SHARE_TOLERANCE, OTHER_WORK_TOLERANCE=OTHER_WORK_TOLERANCE,
                  WAIT_TOLERANCE=WAIT_TOLERANCE, DISTORTION_LIMIT=DISTORTION_LIMIT)


def wait_beyond_quota(figures: dict, period_us: int) -> float:
    """Seconds the peer waited in the run queue beyond what its own quota explains."""
    quota_wait = figures["throttled_periods"] * period_us / 1e6 * figures["threads"]
    return max(0.0, figures["runq_s"] - quota_wait)


def starved(row: dict, beside: float | None) -> bool:
    """A by_rank row (with its quota) short of its promised CPU that waited in the run queue beyond its quota while
    `beside` seconds of other work ran on its cores (None: not known, taken as crowded)."""
    short = row["received_share"] is not None and row["received_share"] < 1 - SHARE_TOLERANCE
    waited = row["wait_beyond_quota_s"] > WAIT_TOLERANCE * row["in_group_s"]
    crowded = beside is None or beside > OTHER_WORK_TOLERANCE * row["in_group_s"]
    return short and waited and crowded


def starved_text(row: dict, beside: float | None, whose: str = "") -> str:
    """Why a starved rank did not get its CPU, in one line (`whose`: what `beside` counted)."""
    waited_share = row["wait_beyond_quota_s"] / row["in_group_s"]
    other = "" if beside is None else f", while other work ran {beside:.1f} s on its cores{whose}"
    return (f"rank {row['rank']} on host {row['host'] or 'unknown'}: received {row['received_share']:.0%} of its "
            f"promised CPU and waited {waited_share:.0%} of its time in the run queue beyond its quota{other}")


StepLoss = tuple[float, float, float, float]  # lost, span, to the last gradient, lost after it (seconds)


def lost_by_step(steps: list[dict], throttled_share: float) -> dict[int, StepLoss]:
    """step -> (seconds its training thread lost to other work, less its quota's share of the step; the step's span;
    its time from the batch to the last gradient; the part of the loss after that, all of it where not recorded) for
    the steps that recorded lost_to_sharing_s."""
    found = {}
    for s in steps:
        if (recorded := s.get("lost_to_sharing_s")) is not None:
            span = sum(s.get(phase) or 0.0 for phase in PHASES)
            lost = max(0.0, recorded - throttled_share * span)
            after = s.get("lost_after_gradient_s")
            to_gradient = sum(s.get(phase) or 0.0 for phase in ("data_s", "compute_s", "compute_wait_s"))
            after_share = 1.0 if after is None or not recorded else after / recorded
            found[s["step"]] = (lost, span, to_gradient, lost * after_share)
    return found


def step_moved(row: list[StepLoss], synchronous: bool) -> float:
    """How far sharing moved one step at most. Synchronous: how much later the slowest rank reached its last gradient
    than the slowest would have without the losses before it (a rank with time to spare absorbs its loss), plus the
    most any rank lost after it; else the most any rank lost."""
    if not synchronous:
        return max(lost for lost, *_ in row)
    delayed = max(to for _, _, to, _ in row) - max(to - (lost - after) for lost, _, to, after in row)
    return max(0.0, delayed) + max(after for *_, after in row)


def step_rows(lost: dict[int, dict[int, StepLoss]]) -> dict[int, list[StepLoss]]:
    """step -> the losses of the ranks that recorded it, by step."""
    steps = sorted({step for by_step in lost.values() for step in by_step})
    return {step: [by_step[step] for by_step in lost.values() if step in by_step] for step in steps}


def throttled_share(row: dict) -> float:
    """The share of a by_rank row's time in its group that its quota throttled it."""
    return min(1.0, (row["throttled_s"] or 0.0) / row["in_group_s"]) if row["in_group_s"] else 0.0


def distortion(lost: dict[int, dict[int, StepLoss]], synchronous: bool = True) -> float | None:
    """How far sharing moved the step, at most (METHODS["isolation"]): per step, step_moved, summed over the steps /
    the ranks' mean span less it, summed; None where no step recorded it."""
    rows = list(step_rows(lost).values())
    moved = [step_moved(row, synchronous) for row in rows]
    unshared = sum(statistics.fmean(span for _, span, *_ in row) for row in rows) - sum(moved)
    return sum(moved) / unshared if unshared > 0 else None


def within_limit(moved: float | None) -> bool | None:
    """Whether the step moved no further than DISTORTION_LIMIT: None where no step recorded lost_to_sharing_s."""
    return None if moved is None else moved <= DISTORTION_LIMIT


def placed(results: dict[int, dict | None]) -> dict[int, dict]:
    """The results of the ranks whose machine (one kernel boot id: emulated hosts share it) and cores are known."""
    return {rank: result for rank, result in sorted(results.items())
            if result and result.get("boot_id") and result.get("cores")}


def shared_cores(results: dict[int, dict | None]) -> list[str]:
    """Cores that two or more ranks of one machine were pinned to."""
    on_core: dict[tuple[str, int], list[int]] = {}
    for rank, result in placed(results).items():
        for core in result["cores"]:
            on_core.setdefault((result["boot_id"], core), []).append(rank)
    return [f"ranks {', '.join(map(str, ranks))} were pinned to the same core {core} of one machine"
            for (_, core), ranks in on_core.items() if len(ranks) > 1]


def run_on_cores(results: dict[int, dict | None]) -> dict[int, float]:
    """Per rank, the CPU seconds the run's other ranks on its machine received on its cores, each such rank's time
    spread evenly over its own cores."""
    where = {rank: (result["boot_id"], set(result["cores"]), (result.get("cpu") or {}).get("cpu_received_s") or 0.0)
             for rank, result in placed(results).items()}
    return {rank: sum(received * len(cores & theirs) / len(theirs)
                      for other, (their_boot, theirs, received) in where.items()
                      if other != rank and their_boot == boot)
            for rank, (boot, cores, _) in where.items()}


def isolation_section(run: RunDir, results: dict[int, dict | None], fits: bool = True,
                      steps_by_rank: dict[int, list[dict]] | None = None, synchronous: bool = True) -> dict:
    """results: rank -> the peer's result.json (None: none written); fits: each process had a core of its own;
    steps_by_rank: each worker's steps in the measurement window; synchronous: the workers step in lockstep.
    A rank with steps is judged by distortion, one without (ps's server) by the CPU rule (starved)."""
    groups = json.loads(run.cpu_groups.read_text()) if run.cpu_groups.exists() else {
        "status": "not isolated", "reason": "no cpu groups recorded (a run from before isolation existed)",
        "cgroup": None, "period_us": None, "ranks": {}}
    dilation = json.loads(run.dilation.read_text()) if run.dilation.exists() else {"factor": 1, "unchecked": False}
    by_rank, unfaithful, lost = [], [], {}
    co_tenants = run_on_cores(results)
    for rank, result in sorted(results.items()):
        figures = (result or {}).get("cpu") or {}
        host = (result or {}).get("host")
        row: Json = {"rank": rank, "host": host} | {k: None if k in DERIVED else figures.get(k) for k in ROW}
        if by_step := lost_by_step((steps_by_rank or {}).get(rank, []), throttled_share(row)):
            lost[rank] = by_step
            row["distortion"] = distortion({rank: by_step})
        if row["quota_cpus"] is not None:
            row["cpu_promised_s"] = row["quota_cpus"] * row["in_group_s"]
            row["received_share"] = row["cpu_received_s"] / row["cpu_promised_s"] if row["cpu_promised_s"] else None
            row["wait_beyond_quota_s"] = wait_beyond_quota(figures, groups["period_us"])
            row["run_on_cores_s"] = co_tenants.get(rank)
            other = row["other_on_cores_s"]  # the run's own ranks pinned there by its shape are not other work
            foreign = None if other is None else max(0.0, other - (row["run_on_cores_s"] or 0.0))
            if not by_step and starved(row, foreign):
                unfaithful.append(starved_text(row, foreign))
        if figures.get("error"):
            unfaithful.append(f"rank {rank} on host {host or 'unknown'} ran outside its CPU group: {figures['error']}")
        by_rank.append(row)
    moved = distortion(lost, synchronous)
    if moved is not None and moved > DISTORTION_LIMIT:  # named: the rank that lost the most
        worst = max((r for r in by_rank if r["distortion"] is not None), key=lambda r: r["distortion"])
        unfaithful.append(f"sharing moved the step by {moved:.1%} (distortion), beyond the limit of "
                          f"{DISTORTION_LIMIT:.1%}; rank {worst['rank']} on host {worst['host'] or 'unknown'} lost "
                          f"the most, {worst['distortion']:.1%}")
    sharing = shared_cores(results) if fits and moved is None else []  # judged steps count what sharing did
    unfaithful += [f"{mark} though it had a core for each" for mark in sharing]
    measured = bool(unfaithful) or moved is not None or groups["status"] == "isolated" and any(
        r["received_share"] is not None for r in by_rank)
    return {"status": groups["status"], "reason": groups["reason"], "cgroup": groups["cgroup"],
            "period_us": groups["period_us"], "dilation": dilation["factor"],
            "dilation_unchecked": dilation["unchecked"], "distortion": moved, "distortion_limit": DISTORTION_LIMIT,
            "distortion_within_limit": within_limit(moved),
            "faithful": (not unfaithful) if measured else None, "unfaithful": unfaithful, "by_rank": by_rank}


# A figure's unit is in its name (metrics/recording/units.py; seconds may hold "_s_per_"); a section named with a unit
# passes it to all it holds; NAME_by_rank has NAME's unit, or that of NAME_s beside it (time_to_target_by_rank).
SECONDS_SUFFIXES = (*TIME_SUFFIXES, "_ns")
RATE_SUFFIXES = ("_per_s", *KNOB_RATE_SUFFIXES)
UNITLESS_SUFFIXES = ("_share", "_ratio")
# Measured on the real clock by design, or already in the emulated cluster's terms: left as they are.
NOT_CONVERTED = ("config", "methods", "isolation", "machine", "cpu", "wall_phases_s")


def time_factor(name: str, k: float, siblings: dict | None = None) -> float | None:
    """A figure's factor back from dilation k: 1/k (seconds), k (rates), 1 (shares, ratios), None (no unit: look in)."""
    stem = name.removesuffix("_by_rank")
    if stem.endswith(UNITLESS_SUFFIXES):
        return 1.0
    if stem.endswith(RATE_SUFFIXES):
        return k
    if (stem.endswith(SECONDS_SUFFIXES) or "_s_per_" in stem
            or stem != name and siblings is not None and f"{stem}_s" in siblings):
        return 1 / k
    return None


def undilate(summary: Json, k: float) -> Json:
    """A dilated run's figures in the emulated cluster's time, at any depth (METHODS["dilation"])."""
    if k == 1:
        return summary

    def scaled(value: Any, factor: float) -> Any:
        if factor == 1:
            return value
        if isinstance(value, dict):
            return {key: scaled(v, factor) for key, v in value.items()}
        if isinstance(value, list):
            return [scaled(v, factor) for v in value]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value * factor
        return value

    def walk(value: Any) -> Any:
        if isinstance(value, list):
            return [walk(v) for v in value]
        if not isinstance(value, dict):
            return value
        out = {}
        for key, v in value.items():
            if key in NOT_CONVERTED:
                out[key] = v
            elif (factor := time_factor(str(key), k, value)) is None:
                out[key] = walk(v)
            else:
                out[key] = scaled(v, factor)
        return out

    return walk(summary)
