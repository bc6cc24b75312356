"""How busy the machine was around a run (MachineSampler) and what a peer's threads got a step (ProcessClock)."""
import os
import time
from pathlib import Path

from metrics.recording.sampler import IntervalSampler

PRESSURE = Path("/proc/pressure/cpu")
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
THREAD_SCHEDSTAT = "/proc/thread-self/schedstat"  # field 2: ns this thread waited runnable for a CPU


# --- peer side: per step ------------------------------------------------------------------------
def thread_run_delays(pids: list[int]) -> dict[int, int]:
    """Thread id -> ns runnable but waiting for a CPU (schedstat field 2), for the live threads of these processes."""
    found = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                found[int(tid)] = run_delay_ns(f"/proc/{pid}/task/{tid}/schedstat")
            except (OSError, IndexError, ValueError):
                pass
    return found


def run_delay_ns(path: str = THREAD_SCHEDSTAT, fd: int | None = None) -> int:
    """ns a thread waited runnable for a CPU (schedstat field 2): read on `fd`, kept open on its schedstat, or from
    `path` (the calling thread's by default)."""
    if fd is not None:
        return int(os.pread(fd, 128, 0).split()[1])
    with open(path, "rb") as f:
        return run_delay_ns(fd=f.fileno())


def thread_wait_s() -> float:
    """Seconds the calling thread has waited runnable for a CPU (0 where the kernel keeps no schedstat)."""
    try:
        return run_delay_ns() / 1e9
    except OSError:
        return 0.0


class ProcessClock:
    """CPU time and run-queue delay of this process, all threads."""

    def __init__(self) -> None:
        self.runq_ns: dict[int, int] = {}
        self.has_schedstat = os.path.exists(f"/proc/{os.getpid()}/schedstat")

    def start(self) -> None:
        self.cpu = time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID)
        if self.has_schedstat:
            self.runq_ns = thread_run_delays([os.getpid()])

    def since_start(self) -> dict[str, float | None]:
        """{cpu_s, runq_s} since start() (runq_s null where the kernel keeps no schedstat)."""
        cpu = time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID) - self.cpu
        if not self.has_schedstat:
            return {"cpu_s": cpu, "runq_s": None}
        now = thread_run_delays([os.getpid()])
        runq = sum(ns - self.runq_ns.get(tid, 0) for tid, ns in now.items())
        return {"cpu_s": cpu, "runq_s": runq / 1e9}


# --- launch side: the machine ---------------------------------------------------------------------
def cpu_pressure_us() -> int | None:
    """/proc/pressure/cpu 'some' total in microseconds; None where the kernel has no PSI."""
    try:
        some = PRESSURE.read_text().splitlines()[0]
    except OSError:
        return None
    return int(some.rsplit("total=", 1)[1])


def cpu_times(cores: set[int], path: str = "/proc/stat") -> dict[str, float]:
    """busy, irq (interrupts and softirqs: part of busy), steal and all CPU seconds of these cores since boot."""
    busy = steal = total = interrupts = 0
    with open(path) as f:
        for line in f:
            name, *fields = line.split()
            if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cores:
                continue
            user, nice, system, idle, iowait, irq, softirq, stolen = map(int, fields[:8])
            busy += user + nice + system + irq + softirq
            interrupts += irq + softirq
            steal += stolen
            total += user + nice + system + idle + iowait + irq + softirq + stolen
    return {"busy_s": busy * TICK_S, "irq_s": interrupts * TICK_S, "steal_s": steal * TICK_S, "all_s": total * TICK_S}


def own_cpu_s() -> float:
    """CPU time of this process and of the children it has reaped (theirs include their reaped children)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class MachineSampler(IntervalSampler):
    """Samples the machine into RUN/.avgbench/machine.jsonl every `interval` s, and once at start and stop."""

    def __init__(self, path: Path, interval: float = 1.0):
        super().__init__("avgbench-machine", path, interval)
        self.cores = set(os.sched_getaffinity(0))
        self._t0 = time.monotonic()
        self.out.write(self.sample())

    def sample(self) -> dict:
        return {"t": round(time.monotonic() - self._t0, 3), "psi_some_us": cpu_pressure_us(),
                **cpu_times(self.cores), "load1": os.getloadavg()[0], "run_cpu_s": own_cpu_s()}


FINGERPRINT = {"cpu_vendor": "vendor", "cpu_model_name": "model name", "cpu_family": "family", "cpu_model": "model",
               "cpu_mhz": "clock", "cores": "cores", "memory_gib": "memory", "kernel": "kernel",
               "gpu": "GPU"}  # machine()'s fields and their short names
UNKNOWN = "unknown"


def fingerprint() -> dict:
    """The machine a result was measured on (FINGERPRINT's fields) and the load average when the benchmark ended."""
    import platform

    import psutil
    import torch

    first_cpu = open("/proc/cpuinfo").read().split("\n\n")[0]
    cpu = {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in first_cpu.splitlines())}
    mhz = cpu.get("cpu MHz")
    return {
        "cpu_vendor": cpu.get("vendor_id", UNKNOWN),
        "cpu_model_name": cpu.get("model name", UNKNOWN),
        "cpu_family": cpu.get("cpu family", UNKNOWN),
        "cpu_model": cpu.get("model", UNKNOWN),
        "cpu_mhz": round(float(mhz)) if mhz else UNKNOWN,
        "cores": len(os.sched_getaffinity(0)),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "kernel": platform.release(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU",
        "load_average": round(os.getloadavg()[0], 1),
    }


SAME_MACHINE = ("cpu_vendor", "cpu_model_name", "cpu_family", "cpu_model", "cpu_mhz", "cores", "kernel")


def same_machine(recorded: dict, current: dict) -> bool:
    """Whether two fingerprints name the same kind of machine: SAME_MACHINE's fields equal and all recorded."""
    return all(recorded.get(key, UNKNOWN) == current.get(key, UNKNOWN) != UNKNOWN for key in SAME_MACHINE)


def describe_machine(fingerprint: dict) -> str:
    """A fingerprint() in one line, e.g. "GenuineIntel ..., 2 cores, 23.4 GiB, no GPU (not recorded: kernel)"."""
    def known(key: str, text: str | None) -> str | None:
        return None if fingerprint.get(key, UNKNOWN) == UNKNOWN else text

    f = fingerprint
    cpu = " ".join(filter(None, (known("cpu_vendor", f.get("cpu_vendor")),
                                 known("cpu_model_name", f.get("cpu_model_name"))))) or "CPU unknown"
    family = " ".join(filter(None, (known("cpu_family", f"family {f.get('cpu_family')}"),
                                    known("cpu_model", f"model {f.get('cpu_model')}"),
                                    known("cpu_mhz", f"at {f.get('cpu_mhz')} MHz"))))
    parts = [cpu, family, known("cores", f"{f.get('cores')} cores"), known("memory_gib", f"{f.get('memory_gib')} GiB"),
             known("kernel", f"kernel {f.get('kernel')}"), known("gpu", f.get("gpu"))]
    missing = [name for key, name in FINGERPRINT.items() if not known(key, key)]
    return ", ".join(filter(None, parts)) + (f" (not recorded: {', '.join(missing)})" if missing else "")
