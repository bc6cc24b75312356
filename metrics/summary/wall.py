"""Where a run's wall time goes (summary.json wall_phases_s); definitions: docs/runs.md (Figures)."""
import time
from dataclasses import dataclass

from metrics.summary.schema import Summary, WallPhases


@dataclass(frozen=True)
class LaunchClock:
    """Unix times of the launch side's steps of a job."""
    job_started_at: float  # the command's process start (its first job), else the end of the job before
    run_at: float  # train.py took the job
    peers_started_at: float | None  # the launcher began starting the peers (None: it never did)
    torn_down_at: float  # the run's processes, CPU groups and namespaces gone, its snapshots deleted


def wall_phases(clock: LaunchClock, ended_at: float, workers: list[dict]) -> dict[str, float]:
    """Seconds of each phase from the job's start to now, summing to that span; ended_at: the launcher saw the last
    process end; workers: peer_figures of the workers (the one that ended last gives the phases in the peers)."""
    recorded = [w for w in workers if "loop_s" in ((w["result"] or {}).get("wall_phases") or {})]
    last = max(recorded, key=lambda w: w["result"]["wall_phases"]["ended_at"], default=None)
    spans: dict[str, float] = {}
    at = clock.job_started_at

    def until(phase: str, instant: float) -> None:  # from `at` to instant (never back) is the phase's
        nonlocal at
        spans[phase], at = spans.get(phase, 0.0) + max(0.0, instant - at), max(at, instant)

    until("command_s", clock.run_at)
    until("launch_s", clock.peers_started_at or ended_at)
    if last:
        own, result = last["result"]["wall_phases"], last["result"]
        until("imports_s", own["started_at"])
        until("worker_s", own["ended_at"])
        evaluation = own["evaluation_paused_s"] + own["after_training_s"]
        snapshot, precise, test = result.get("snapshot_s", 0.0), own["precise_bn_s"], own["test_s"]
        spans |= {"imports_s": spans["imports_s"] + own.get("imports_s", 0.0), "data_s": own["data_s"],
                  "model_s": own["model_s"], "rendezvous_s": own["rendezvous_s"] + last["startup_wait_s"],
                  "training_s": last["train_s"], "snapshot_s": snapshot, "precise_bn_s": precise, "test_s": test,
                  "evaluation_wait_s": evaluation - snapshot - precise - test,
                  "speed_reference_s": (result.get("speed_reference") or {}).get("cost_s", 0.0)}
    until("exit_s", ended_at)
    until("teardown_s", clock.torn_down_at)
    until("summary_s", time.time())
    spans.pop("worker_s", None)  # the worker's own span: its phases above, its rest other
    return WallPhases.from_dict(spans | {"other_s": at - clock.job_started_at - sum(spans.values())}).seconds()


def nodes_wall_phases(summaries: list[Summary]) -> dict[str, float] | None:
    """A run's wall phases over its nodes' summaries: the phases of the node whose launcher ended last, from the
    earliest node's start (other_s holds the time before its own start)."""
    def ended_at(node: Summary) -> float:  # the launcher saw its last process end (wall_s: the emulated cluster's time)
        return node.started_at + node.wall_s * (node.isolation.dilation or 1)

    def started_at(node: Summary) -> float:  # all its phases but teardown_s and summary_s come before ended_at
        phases = node.wall_phases_s
        return ended_at(node) - sum(phases.seconds().values()) + phases.teardown_s + phases.summary_s

    recorded = [s for s in summaries if s.wall_phases_s]
    if not recorded:
        return None
    last = max(recorded, key=ended_at)
    phases = last.wall_phases_s.seconds()
    return phases | {"other_s": phases["other_s"] + started_at(last) - min(map(started_at, recorded))}
