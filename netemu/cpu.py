"""The emulated cluster's CPU side: each peer in its own CPU cgroup with a quota (after Mininet-HiFi), created by the
launcher before any peer starts and removed once every process has ended (a killed launcher's by the next run).
Quotas, what is accounted and when a quota is left unset: docs/emulation.md (CPU isolation)."""
import contextlib
import json
import os
import re
import signal
import sys
import time
from typing import Any, TypedDict

import psutil
from omegaconf import DictConfig

from job.cpugroup import CpuGroup, write
from job.errors import ConfigError
from job.process import usable_cores
from metrics.recording.rundir import RunDir

ISOLATE_MODES = ("auto", "on", "off")
NOT_ISOLATED, ISOLATED = "not isolated", "isolated"
MIN_QUOTA_US = 1000  # the kernel refuses smaller CFS quotas (v1 and v2)


class CgroupUnavailable(RuntimeError):
    """No CPU cgroup can be written here; the message says why."""


def cgroup_mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fstype, super options) of every cgroup mount, from /proc/self/mountinfo."""
    mounts = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, post = line.split(" - ", 1)
            fstype, _source, options = post.split()[:3]
            if fstype in ("cgroup", "cgroup2"):
                mounts.append((pre.split()[4], fstype, set(options.split(","))))
    return mounts


def find_hierarchy() -> tuple[str, list[str]]:
    """("v1", [cpu root, cpuacct root]) or ("v2", [root]) where this process may create CPU groups."""
    mounts = cgroup_mounts()
    cpu = next((m for m, t, o in mounts if t == "cgroup" and "cpu" in o), None)
    acct = next((m for m, t, o in mounts if t == "cgroup" and "cpuacct" in o), None)
    if cpu and acct:
        version, roots = "v1", list(dict.fromkeys([cpu, acct]))
    else:
        unified = [m for m, t, _ in mounts if t == "cgroup2"]
        with_cpu = [m for m in unified if "cpu" in _read(os.path.join(m, "cgroup.controllers")).split()]
        if not with_cpu:
            raise CgroupUnavailable("no cgroup hierarchy with the cpu controller is mounted "
                                    f"(cgroup mounts: {', '.join(m for m, _, _ in mounts) or 'none'})")
        version, roots = "v2", with_cpu[:1]
    probe = [os.path.join(root, f"avgbench-probe-{os.getpid()}") for root in roots]
    try:
        for path in probe:
            os.mkdir(path)
        if version == "v2":
            write(os.path.join(roots[0], "cgroup.subtree_control"), "+cpu")
    except OSError as exc:
        raise CgroupUnavailable(f"cannot create a cpu cgroup under {', '.join(roots)} ({version}): "
                                f"{exc.strerror} (needs root, or a cgroup subtree delegated to this user)") from exc
    finally:
        for path in probe:
            with contextlib.suppress(OSError):
                os.rmdir(path)
    return version, roots


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


class Emulate(TypedDict):
    isolate: str
    peer_cpu_share: list[float | None]
    dilation: float
    period_us: int
    allow_unchecked_dilation: bool


def emulate_of(cfg: DictConfig) -> Emulate:
    """The emulate block with its defaults (configs saved before it existed have none)."""
    block = cfg.get("emulate") or {}
    return {"isolate": block.get("isolate", "auto"), "peer_cpu_share": list(block.get("peer_cpu_share") or []),
            "dilation": float(block.get("dilation", 1)), "period_us": int(block.get("period_us", 10000)),
            "allow_unchecked_dilation": bool(block.get("allow_unchecked_dilation", False))}


def rank_quotas(cfg: DictConfig, threads: int, processes: int) -> dict[int, float]:
    """CPUs each rank may use: threads x peer_cpu_share[rank] / dilation."""
    emulate = emulate_of(cfg)
    shares = emulate["peer_cpu_share"] + [None] * (processes - len(emulate["peer_cpu_share"]))
    return {rank: threads * (1.0 if share is None else float(share)) / emulate["dilation"]
            for rank, share in enumerate(shares)}


def check_emulate_config(cfg: DictConfig, threads: int, processes: int) -> None:
    """Raise ConfigError for emulate knobs that do not fit the run (the values alone are launchers/schema.py's), or
    isolation asked for (on, dilation, shares) that cannot be had."""
    emulate = emulate_of(cfg)
    shares = emulate["peer_cpu_share"]
    if len(shares) > processes:
        raise ConfigError(f"emulate.peer_cpu_share has {len(shares)} entries, "
                          f"more than the run's {processes} processes")
    for rank, share in enumerate(shares):
        if share is not None and not 0 < float(share) <= 1:
            raise ConfigError(f"emulate.peer_cpu_share[{rank}] must be in (0, 1] (or null), got {share}")
    smallest = min(rank_quotas(cfg, threads, processes).values())
    if smallest * emulate["period_us"] < MIN_QUOTA_US:
        raise ConfigError(f"the smallest CPU quota, {smallest:g} CPU, is under {MIN_QUOTA_US} us per "
                          f"emulate.period_us={emulate['period_us']}: raise emulate.period_us")
    needs = [why for why, needed in (("emulate.isolate=on", emulate["isolate"] == "on"),
                                     (f"emulate.dilation={emulate['dilation']:g}", emulate["dilation"] != 1),
                                     ("emulate.peer_cpu_share", any(s is not None for s in shares)))
             if needed]
    if not needs:
        return
    if emulate["isolate"] == "off":
        raise ConfigError(f"{needs[0]} needs CPU isolation, but emulate.isolate=off")
    try:
        find_hierarchy()
    except CgroupUnavailable as exc:
        raise ConfigError(f"{needs[0]} needs CPU isolation: {exc}; or run without it "
                          "(emulate.isolate=auto, dilation 1, no peer_cpu_share)") from exc


class CpuGroups:
    """The run's groups on this host: `start()` before the peers, `close()` after they all ended."""

    def __init__(self, cfg: DictConfig, run: RunDir, run_id: str, threads: int, processes: int):
        self.run, self.name, self.threads = run, f"avgbench-{os.getpid()}-{run_id}", threads
        self.emulate = emulate_of(cfg)
        launch = cfg.get("launch") or {}
        nnodes, node_rank = int(launch.get("nnodes", 1)), int(launch.get("node_rank", 0))
        local = range(node_rank * processes // nnodes, (node_rank + 1) * processes // nnodes)  # this host's ranks
        self.quotas = {r: q for r, q in rank_quotas(cfg, threads, processes).items() if r in local}
        self.own_cores = len(local) * threads <= usable_cores()  # each process's threads on cores of its own
        self.parents: list[str] = []
        self.groups: dict[int, CpuGroup] = {}

    def start(self) -> None:
        """Create the groups, or record why the run is not isolated (and say so once on stderr)."""
        record: dict[str, Any] = {"status": NOT_ISOLATED, "reason": None, "cgroup": None,
                                  "period_us": self.emulate["period_us"], "ranks": {}}
        if self.emulate["isolate"] == "off":
            record["reason"] = "emulate.isolate=off"
        else:
            try:
                version, roots = find_hierarchy()
            except CgroupUnavailable as exc:
                record["reason"] = str(exc)
                print(f"avgbench: peers not isolated: {exc}", file=sys.stderr)
            else:
                remove_abandoned(roots)
                try:
                    self._create(version, roots)
                except OSError as exc:
                    raise CgroupUnavailable(f"creating the run's cpu groups: {exc}") from exc
                record |= {"status": ISOLATED, "cgroup": version,
                           "ranks": {str(r): g.to_json() for r, g in self.groups.items()}}
        self.run.cpu_groups.parent.mkdir(parents=True, exist_ok=True)
        self.run.cpu_groups.write_text(json.dumps(record, indent=1))

    def _create(self, version: str, roots: list[str]) -> None:
        for root in roots:
            self.parents.append(os.path.join(root, self.name))
            os.mkdir(self.parents[-1])
        if version == "v2":  # the parent holds no process, so it may hand the cpu controller to its children
            write(os.path.join(self.parents[0], "cgroup.subtree_control"), "+cpu")
        for rank, quota in self.quotas.items():
            dirs = [os.path.join(parent, f"rank{rank}") for parent in self.parents]
            for d in dirs:
                os.mkdir(d)
            self.groups[rank] = CpuGroup(version, dirs, list(self.parents), quota, self.emulate["period_us"],
                                         self.threads, enforced=not (self.own_cores and quota >= self.threads))
            self.groups[rank].set_quota()

    def close(self) -> None:
        """Remove every group (killing what is still inside: by construction it belongs to this run)."""
        for path in [d for g in self.groups.values() for d in g.dirs] + self.parents:
            try:
                _remove(path)
            except OSError as exc:
                print(f"avgbench: could not remove cpu group {path}: {exc}", file=sys.stderr)
        self.groups, self.parents = {}, []


GROUP_NAME = re.compile(r"avgbench-(?:(?P<pid>\d+)-)?[0-9a-f]{32}")  # without a pid: named before pids were


def remove_abandoned(roots: list[str]) -> list[str]:
    """Remove the groups that killed launchers left under these roots: named by a launcher pid that is gone (or by no
    pid), with no process anywhere inside. Returns their paths."""
    removed = []
    for root in roots:
        for name in os.listdir(root):
            found = GROUP_NAME.fullmatch(name)
            if not found or found["pid"] and psutil.pid_exists(int(found["pid"])):
                continue
            parent = os.path.join(root, name)
            inside = [os.path.join(parent, d) for d in os.listdir(parent) if os.path.isdir(os.path.join(parent, d))]
            if any(_read(os.path.join(d, "cgroup.procs")).strip() for d in [parent, *inside]):
                continue
            with contextlib.suppress(OSError):  # another launcher may be removing it too
                for d in [*inside, parent]:
                    os.rmdir(d)
                removed.append(parent)
    return removed


def _remove(path: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
        for pid in _read(os.path.join(path, "cgroup.procs")).split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.05)
