"""A peer's resources.jsonl (docs/runs.md): its process tree's CPU, memory, disk; its network namespace's counters."""
import threading
import time
from pathlib import Path

import psutil

from metrics.recording.jsonl import JsonlWriter

DRAIN_POLL_S = 0.01  # how often the drain looks for bytes the receivers have not acknowledged
DRAIN_TIMEOUT_S = 3.0
TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


def read_net_dev(path: str = "/proc/net/dev") -> dict[str, tuple[int, int]]:
    """Interface -> (rx_bytes, tx_bytes) for this process's network namespace."""
    counters = {}
    with open(path) as f:
        for line in f.readlines()[2:]:
            name, data = line.split(":", 1)
            fields = data.split()
            counters[name.strip()] = (int(fields[0]), int(fields[8]))
    return counters


def net_totals() -> dict[str, int]:
    counters = read_net_dev()
    lo_rx, lo_tx = counters.pop("lo", (0, 0))
    return {
        "net_rx_bytes": sum(rx for rx, _ in counters.values()),
        "net_tx_bytes": sum(tx for _, tx in counters.values()),
        "lo_rx_bytes": lo_rx,
        "lo_tx_bytes": lo_tx,
    }


class WireCounter:
    """Bytes on this namespace's non-loopback interfaces since the counter was made (per peer with network=emulated)."""

    def __init__(self) -> None:
        self.first = net_totals()

    def since_start(self) -> dict[str, int]:
        now = net_totals()
        return {"wire_tx_bytes": now["net_tx_bytes"] - self.first["net_tx_bytes"],
                "wire_rx_bytes": now["net_rx_bytes"] - self.first["net_rx_bytes"]}

    def drained(self, timeout_s: float = DRAIN_TIMEOUT_S, sockets: tuple[str, ...] = TCP_TABLES) -> dict[str, int]:
        """since_start() once the receivers acknowledged every byte the namespace's TCP sockets sent, or after
        timeout_s: bytes handed to the kernel in a step can still wait in the socket and the link's queue when the step
        ends (an interface that never goes quiet, e.g. Horovod's negotiation, does not hold the reading back)."""
        deadline = time.monotonic() + timeout_s
        while unacknowledged_bytes(sockets) and time.monotonic() < deadline:
            time.sleep(DRAIN_POLL_S)
        return self.since_start()


def unacknowledged_bytes(tables: tuple[str, ...] = TCP_TABLES) -> int:
    """Bytes sent on this namespace's TCP sockets and not yet acknowledged (tx_queue of /proc/net/tcp and tcp6)."""
    lines = [line for table in tables if Path(table).exists() for line in Path(table).read_text().splitlines()[1:]]
    return sum(int(line.split()[4].split(":")[0], 16) for line in lines)


class IntervalSampler(threading.Thread):
    """A thread that writes sample() as one JSON line every `interval` seconds, and once more at stop()."""

    def __init__(self, name: str, path: Path, interval: float):
        super().__init__(name=name, daemon=True)
        self.interval = interval
        self.out = JsonlWriter(path)
        self._stop_event = threading.Event()

    def sample(self) -> dict:
        raise NotImplementedError

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            self.out.write(self.sample())

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=5)
        self.out.write(self.sample())
        self.out.close()


class ResourceSampler(IntervalSampler):
    def __init__(self, path: Path, interval: float, pid: int | None = None):
        super().__init__("avgbench-sampler", path, interval)
        self.root = psutil.Process(pid)
        self._cpu_seen: dict[int, float] = {}
        self._t0 = time.monotonic()
        self._last = self._t0
        for proc in self._tree():  # existing processes count from now on
            self._cpu_seen[proc.pid] = self._cpu_total(proc) or 0.0

    def _tree(self) -> list[psutil.Process]:
        try:
            return [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    @staticmethod
    def _cpu_total(proc: psutil.Process) -> float | None:
        try:
            times = proc.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None
        return times.user + times.system

    def sample(self) -> dict:
        now = time.monotonic()
        cpu = 0.0
        rss = read = write = threads = procs = 0
        seen = {}
        for proc in self._tree():
            total = self._cpu_total(proc)
            if total is None:
                continue
            try:
                with proc.oneshot():
                    rss += proc.memory_info().rss
                    threads += proc.num_threads()
                    io = proc.io_counters()
                    read += io.read_bytes
                    write += io.write_bytes
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            cpu += total - self._cpu_seen.get(proc.pid, 0.0)
            seen[proc.pid] = total
            procs += 1
        self._cpu_seen = seen
        elapsed = max(now - self._last, 1e-9)
        self._last = now
        return {
            "t": round(now - self._t0, 3),
            "cpu_percent": round(100.0 * cpu / elapsed, 1),
            "rss_bytes": rss,
            "read_bytes": read,
            "write_bytes": write,
            "threads": threads,
            "procs": procs,
            **net_totals(),
        }
