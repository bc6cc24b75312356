"""A peer's CPU group (a cgroup v1 or v2 with a CPU quota): its kernel files, and the peer's side. The launcher
(netemu/cpu.py) makes one per rank; each peer joins its own first, so everything it starts is in it too."""
import json
import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Iterator

import psutil

from metrics.recording.machine import cpu_times, thread_run_delays
from metrics.recording.rundir import RunDir


def write(path: str, value: object) -> None:
    with open(path, "w") as f:
        f.write(str(value))


def read_stat(path: str) -> dict[str, int]:
    with open(path) as f:
        return {key: int(value) for key, value in (line.split() for line in f if line.strip())}


@dataclass
class CpuGroup:
    """One rank's group: `dirs` one per hierarchy (v1: cpu, cpuacct; v2: one), `parents` the run's group."""

    version: str  # "v1" | "v2"
    dirs: list[str]
    parents: list[str]
    quota_cpus: float
    period_us: int
    threads: int  # the peer's vCPUs (peer_cpus): its quota is threads x share / dilation
    enforced: bool = True  # False: the peer's own cores bound it to its quota; a CFS quota would only throttle it

    def _file(self, name: str, dirs: list[str] | None = None) -> str:
        return next(os.path.join(d, name) for d in (dirs or self.dirs) if os.path.exists(os.path.join(d, name)))

    def set_quota(self) -> None:
        if not self.enforced:
            self.lift_quota()
            return
        quota_us = round(self.quota_cpus * self.period_us)
        if self.version == "v1":
            write(self._file("cpu.cfs_period_us"), self.period_us)
            write(self._file("cpu.cfs_quota_us"), quota_us)
        else:
            write(self._file("cpu.max"), f"{quota_us} {self.period_us}")

    def lift_quota(self) -> None:
        """No quota from now on (the group keeps its accounting)."""
        if self.version == "v1":
            write(self._file("cpu.cfs_quota_us"), -1)
        else:
            write(self._file("cpu.max"), f"max {self.period_us}")

    def join(self, pid: int) -> None:
        """Move process `pid` (all its threads) into the group; children it starts later inherit it."""
        for d in self.dirs:
            write(os.path.join(d, "cgroup.procs"), pid)

    def move_thread_out(self, tid: int) -> bool:
        """Move one thread into the run's parent group (v1 only: v2 keeps a process's threads together)."""
        if self.version != "v1":
            return False
        for d in self.parents:
            write(os.path.join(d, "tasks"), tid)
        return True

    def usage_s(self) -> float:
        if self.version == "v1":
            with open(self._file("cpuacct.usage")) as f:
                return int(f.read()) / 1e9
        return read_stat(self._file("cpu.stat"))["usage_usec"] / 1e6

    def usage_on_cores_s(self, cores: set[int]) -> tuple[float, float] | None:
        """(this group's, every task's) CPU seconds on `cores` since boot (v1's cpuacct.usage_percpu; None on v2)."""
        if self.version != "v1":
            return None
        roots = [os.path.dirname(parent) for parent in self.parents]

        def on_cores(dirs: list[str]) -> float:
            with open(self._file("cpuacct.usage_percpu", dirs)) as f:
                return sum(int(ns) for core, ns in enumerate(f.read().split()) if core in cores) / 1e9

        return on_cores(self.dirs), on_cores(roots)

    def throttling(self) -> tuple[int, float]:
        """(periods in which the group was throttled, seconds throttled), since it was created."""
        stat = read_stat(self._file("cpu.stat"))
        if self.version == "v1":
            return stat["nr_throttled"], stat["throttled_time"] / 1e9
        return stat["nr_throttled"], stat["throttled_usec"] / 1e6

    @classmethod
    def of_rank(cls, run: RunDir, rank: int) -> "CpuGroup | None":
        """The group made for `rank` (None: not isolated, or not this host's); FileNotFoundError if not visible."""
        if not run.cpu_groups.exists():
            return None
        group = json.loads(run.cpu_groups.read_text())["ranks"].get(str(rank))
        if not group:
            return None
        if missing := [d for d in group["dirs"] if not os.path.isdir(d)]:
            raise FileNotFoundError(f"{missing[0]} is not visible from this process")
        return cls(**group)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def tree_run_delays(pid: int) -> dict[int, int]:
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return {}
    return thread_run_delays([p.pid for p in procs])


class PeerCpu:
    """This peer's CPU figures since it joined its group (or started), for result.json."""

    def __init__(self, run: RunDir, rank: int):
        self.error: str | None = None
        try:
            self.group = CpuGroup.of_rank(run, rank)
            if self.group is not None:
                self.group.join(os.getpid())
        except OSError as exc:  # e.g. the launcher's host differs from this one: the summary marks it unfaithful
            self.error, self.group = f"could not join its cpu group: {exc}", None
        self.joined = time.monotonic()
        self.excluded: set[int] = set()  # threads outside the group (the resource sampler)
        self.first_delays = tree_run_delays(os.getpid())
        self.first_usage, (self.first_periods, self.first_throttled) = (
            (self.group.usage_s(), self.group.throttling()) if self.group else (0.0, (0, 0.0)))
        self.cores: set[int] = set()  # where the peer was pinned; the CPU time of tasks and interrupts there then
        self.first_cores_irq = 0.0
        self.usage_at_pinning: tuple[float, float] | None = None
        self.aside: dict[str, float] = {}  # ADDITIVE figures of the spans set aside

    def pinned(self, cores: list[int]) -> None:
        """The peer is pinned to `cores` from now on: measure the other work on them (METHODS["isolation"])."""
        self.cores = set(cores)
        self.first_cores_irq = cpu_times(self.cores)["irq_s"]
        self.usage_at_pinning = self.group.usage_on_cores_s(self.cores) if self.group else None

    def keep_out(self, tid: int | None) -> None:
        """A measuring thread (the sampler) leaves the peer's group where the kernel allows it (v1)."""
        if self.group is not None and tid is not None and self.group.move_thread_out(tid):
            self.excluded.add(tid)

    released: dict[str, Any] | None = None  # the figures when the peer's quota was lifted
    ADDITIVE = ("in_group_s", "runq_s", "cpu_received_s", "throttled_periods", "throttled_s", "other_on_cores_s",
                "irq_on_cores_s")  # the figures a set-aside span is taken out of

    def release(self) -> None:
        """Training ended on this host: take the figures now, then lift the quota (evaluation is not measured)."""
        self.released = self.figures()
        if self.group is not None:
            self.group.lift_quota()

    @contextmanager
    def set_aside(self) -> Iterator[None]:
        """A span of training's pauses that is not the run's CPU (an evaluation): left out of the figures."""
        before = self._since_joining()
        try:
            yield
        finally:
            after = self._since_joining()
            for key in self.ADDITIVE:
                if isinstance(after.get(key), (int, float)) and isinstance(before.get(key), (int, float)):
                    self.aside[key] = self.aside.get(key, 0) + after[key] - before[key]

    @contextmanager
    def quota_lifted(self) -> Iterator[None]:
        if self.group is not None:
            self.group.lift_quota()
        try:
            yield
        finally:
            if self.group is not None:
                self.group.set_quota()

    def figures(self) -> dict[str, Any]:
        """From joining the group to now, or to the release, less the spans set aside."""
        if self.released is not None:
            return self.released
        return {key: value - self.aside[key] if key in self.aside and value is not None else value
                for key, value in self._since_joining().items()}

    def _since_joining(self) -> dict[str, Any]:
        delays = tree_run_delays(os.getpid())
        runq_ns = sum(ns - self.first_delays.get(tid, 0) for tid, ns in delays.items() if tid not in self.excluded)
        figures: dict[str, Any] = {"in_group_s": time.monotonic() - self.joined, "runq_s": runq_ns / 1e9,
                                   "error": self.error}
        if self.group is not None:
            periods, throttled = self.group.throttling()
            figures |= {"quota_cpus": self.group.quota_cpus, "quota_enforced": self.group.enforced,
                        "threads": self.group.threads,
                        "cpu_received_s": self.group.usage_s() - self.first_usage,
                        "throttled_periods": periods - self.first_periods,
                        "throttled_s": throttled - self.first_throttled}
            if self.cores:
                figures |= {"cores": sorted(self.cores), "other_on_cores_s": None,
                            "irq_on_cores_s": cpu_times(self.cores)["irq_s"] - self.first_cores_irq}
                usage = self.group.usage_on_cores_s(self.cores)
                if usage is not None and self.usage_at_pinning is not None:
                    (own, every), (first_own, first_every) = usage, self.usage_at_pinning
                    figures["other_on_cores_s"] = max(0.0, (every - first_every) - (own - first_own))
        return figures
