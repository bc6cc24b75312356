"""Does an emulated link carry what it promises? Every SAMPLE_S the meter reads each link direction's token bucket
(bytes sent, bytes queued); where it found a queue, it reads again before that queue could have drained at the
nominal rate, and tallies the bytes of such busy intervals, when the link set the pace. The verdict:
metrics/summary/link.py; docs/emulation.md (Did the link hold?)."""
import json
import select
import subprocess
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from netemu.fabric import Fabric, Host

SAMPLE_S = 0.1        # seconds between readings of every direction's counters
WRITE_EVERY_S = 5.0   # the tallies are written this often (a killed launcher leaves its last figures)
READ_TIMEOUT_S = 2.0  # a tc process that does not answer within this ends the metering (never the run)
DRAIN_AIM = 0.6       # the second reading aims to end at this share of the queue's drain time at the nominal rate


@dataclass(frozen=True)
class Reading:
    """A direction's token bucket counters, read between `before` and `after` (monotonic seconds)."""

    before: float
    after: float
    sent_bytes: int
    queued_bytes: int

    @property
    def at(self) -> float:
        return (self.before + self.after) / 2


@dataclass
class DirectionTally:
    """One direction of one host's link: what it carried, and what it carried in busy intervals: those its queue at
    the start outlasted at the nominal rate (so the queue never emptied, whatever the senders did)."""

    host: int
    direction: str        # egress (the host sends) | ingress (the host receives)
    nominal_mbit: float
    carried_bytes: int = 0
    busy_bytes: int = 0
    busy_s: float = 0.0
    busy_intervals: int = 0
    last: Reading | None = None

    def drain_s(self, queued_bytes: int) -> float:
        """How long the link takes to send `queued_bytes` at its nominal rate."""
        return queued_bytes * 8 / (self.nominal_mbit * 1e6)

    def add(self, reading: Reading) -> None:
        last = self.last
        if last is not None and reading.sent_bytes >= last.sent_bytes:  # else the qdisc was replaced: skip
            sent = reading.sent_bytes - last.sent_bytes
            self.carried_bytes += sent
            if reading.after - last.before <= self.drain_s(last.queued_bytes):
                self.busy_bytes += sent
                self.busy_s += reading.at - last.at
                self.busy_intervals += 1
        self.last = reading

    def figures(self) -> dict[str, Any]:
        figures = asdict(self)
        figures.pop("last")
        return figures


def pick_shaper(qdiscs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The tbf that holds a direction's promise: the root qdisc, or the tbf right under netem's delay (1:1)."""
    for qdisc in qdiscs:
        if qdisc.get("kind") == "tbf" and (qdisc.get("root") or qdisc.get("parent") == "1:1"):
            return qdisc
    return None


class TcReader:
    """A `tc -s -j -batch -` process in one namespace (the prefix's, or the named one it sees): `qdisc show dev
    DEV` -> that device's qdiscs."""

    def __init__(self, prefix: list[str], netns: str | None = None):
        namespace = ["-n", netns] if netns else []
        self.proc = subprocess.Popen([*prefix, "tc", *namespace, "-force", "-s", "-j", "-batch", "-"],
                                     stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
                                     start_new_session=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both pipes
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout

    def qdiscs(self, device: str) -> list[dict[str, Any]]:
        self.stdin.write(f"qdisc show dev {device}\n")
        self.stdin.flush()
        ready, _, _ = select.select([self.stdout], [], [], READ_TIMEOUT_S)
        if not ready:
            raise TimeoutError(f"tc did not answer `qdisc show dev {device}` within {READ_TIMEOUT_S:g} s")
        line = self.stdout.readline()
        if not line:
            raise EOFError(f"tc ended (exit code {self.proc.poll()}) on `qdisc show dev {device}`")
        return json.loads(line)

    def close(self) -> None:
        try:
            self.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


class LinkMeter:
    """Reads every shaped direction of a fabric's links each SAMPLE_S until stop(); writes the tallies to `path`
    (JSON) every WRITE_EVERY_S and at the end. A metering failure is recorded there, never raised into the run."""

    def __init__(self, fabric: Fabric, path: str | Path, sample_s: float = SAMPLE_S):
        self._thread = threading.Thread(target=self.run, name="link-meter", daemon=True)
        self.fabric, self.path, self.sample_s = fabric, Path(path), sample_s
        self.plan: list[tuple[TcReader, str, DirectionTally]] = []  # (reader, device, tally) per direction
        self.readers: list[TcReader] = []
        self.error: str | None = None
        self.readings = 0
        self.first_reading: float | None = None
        self.last_reading: float | None = None
        self._stop_event = threading.Event()

    def start(self) -> "LinkMeter":
        shaped = [h for h in self.fabric.hosts if h.bandwidth_mbit]
        try:
            if shaped:
                hub = self._reader(self.fabric.hub_prefix())
                for host in shaped:
                    inside = self._reader(self.fabric.hub_prefix(), host.netns)
                    self._plan(inside, "eth0", host, "egress")
                    self._plan(hub, f"v{host.index}", host, "ingress")
        except OSError as exc:
            self.error = f"could not start tc to read the links' counters: {exc}"
        self.write()
        if self.plan and self.error is None:
            self._thread.start()
        return self

    def _reader(self, prefix: list[str], netns: str | None = None) -> TcReader:
        reader = TcReader(prefix, netns)
        self.readers.append(reader)
        return reader

    def _plan(self, reader: TcReader, device: str, host: Host, direction: str) -> None:
        assert host.bandwidth_mbit is not None  # only shaped hosts are metered
        self.plan.append((reader, device, DirectionTally(host.index, direction, float(host.bandwidth_mbit))))

    def read_once(self) -> None:
        for reader, device, tally in self.plan:
            first = self._read(reader, device, tally)
            tally.add(first)
            if first.queued_bytes:  # again before that queue can have drained: an interval the link set the pace of
                time.sleep(max(0.0, DRAIN_AIM * tally.drain_s(first.queued_bytes) - 2 * (first.after - first.before)))
                tally.add(self._read(reader, device, tally))
        self.readings += 1
        self.last_reading = time.monotonic()
        self.first_reading = self.first_reading or self.last_reading

    @staticmethod
    def _read(reader: TcReader, device: str, tally: DirectionTally) -> Reading:
        before = time.monotonic()
        shaper = pick_shaper(reader.qdiscs(device))
        if shaper is None:
            raise LookupError(f"no tbf on {device} of host {tally.host}")
        return Reading(before, time.monotonic(), int(shaper["bytes"]), int(shaper["backlog"]))

    def run(self) -> None:
        next_write = time.monotonic() + WRITE_EVERY_S
        try:
            while not self._stop_event.wait(self.sample_s):
                self.read_once()
                if time.monotonic() >= next_write:
                    self.write()
                    next_write = time.monotonic() + WRITE_EVERY_S
        except (OSError, ValueError, TimeoutError, EOFError, LookupError) as exc:
            self.error = f"link metering stopped after {self.readings} readings: {exc}"

    def stop(self) -> None:
        self._stop_event.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        for reader in self.readers:
            reader.close()
        self.write()

    def write(self) -> None:
        first, last = self.first_reading, self.last_reading
        span = last - first if first is not None and last is not None else 0.0
        record = {"sample_s": self.sample_s, "readings": self.readings, "span_s": span, "error": self.error,
                  "directions": [t.figures() for _, _, t in self.plan]}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=1))
        tmp.replace(self.path)
