"""Pacing: each phase of a step lasts k times its calibrated alone-time, so that N peers sharing fewer cores keep
the timing they would have with a core each (docs/emulation.md, Pacing).

- `twin`: compute is a sleep (the model is a compute-free twin: the same parameters, so the same payload and
  buckets); the phase ends at its calibrated time.
- `padded`: compute runs, then the phase is padded with a sleep to k x its calibrated time.

Backward is paced per parameter: a parameter's gradient-ready hook waits until its calibrated offset from backward's
start, so buckets leave when they would. The process's other CPU (its other threads: communication) is charged: a
slot lasts k x (its calibrated time + the CPU the other threads used since its phase began), as on a core of its own
that the two share. Every slot's real end is recorded against its deadline: a phase that ran past its slot (an
overrun) and a sleep that woke late both count as `late_s`.
"""
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

import torch
from torch import nn

PACINGS = ("twin", "padded")


@dataclass(frozen=True)
class Calibration:
    """A step's phases alone, in seconds: medians over steps of one process on one core."""
    data_s: float
    forward_s: float
    grad_ready_s: tuple[float, ...]  # per parameter, in model.parameters() order: backward's start to its gradient
    opt_s: float

    @property
    def compute_s(self) -> float:
        return self.forward_s + max(self.grad_ready_s, default=0.0)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> "Calibration":
        record = json.loads(path.read_text())
        return cls(**(record | {"grad_ready_s": tuple(record["grad_ready_s"])}))


class Recorder:
    """Times a real step's phases for a Calibration: call the marks in order each step, then calibration()."""

    def __init__(self, params: Iterable[nn.Parameter]) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.marks: list[dict[str, float]] = []  # per step: phase -> its start (perf_counter)
        self.ready: list[dict[int, float]] = []  # per step: parameter index -> its gradient's hand-over
        self.handles = [p.register_post_accumulate_grad_hook(self._hook(i)) for i, p in enumerate(self.params)]

    def _hook(self, index: int):  # type: ignore[no-untyped-def]  # a torch hook
        def ready(_: torch.Tensor) -> None:
            self.ready[-1][index] = time.perf_counter()
        return ready

    def mark(self, phase: str) -> None:
        """phase: 'data' (the step starts), 'forward', 'backward', 'opt', 'end' (each marks its phase's start)."""
        if phase == "data":
            self.marks.append({})
            self.ready.append({})
        self.marks[-1][phase] = time.perf_counter()

    def calibration(self, skip: int = 2) -> Calibration:
        marks, ready = self.marks[skip:], self.ready[skip:]
        assert marks, "no step recorded after the warm-up"

        def median(start: str, end: str) -> float:
            return statistics.median(m[end] - m[start] for m in marks)

        offsets = [statistics.median(r[i] - m["backward"] for m, r in zip(marks, ready))
                   for i in range(len(self.params))]
        return Calibration(data_s=median("data", "forward"), forward_s=median("forward", "backward"),
                           grad_ready_s=tuple(offsets), opt_s=median("opt", "end"))

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()


@dataclass
class SlotLog:
    """Each slot's end against its deadline: late_s = real end - deadline (0 where it ended on time)."""
    late_s: list[float] = field(default_factory=list)
    overruns: int = 0  # slots whose work was still running at the deadline
    slept_s: float = 0.0

    def summary(self) -> dict[str, float]:
        late = sorted(self.late_s) or [0.0]
        return {"slots": len(self.late_s), "overrun_share": self.overruns / max(1, len(self.late_s)),
                "late_p50_s": late[len(late) // 2], "late_p99_s": late[min(len(late) - 1, int(0.99 * len(late)))],
                "late_max_s": late[-1], "late_total_s": sum(late), "slept_s": self.slept_s}


class Pacer:
    """Holds a step's phases to k x the calibration. Call data(), forward(), backward(), opt() at each phase's start
    and end() after the update; gradient hooks pace backward."""

    def __init__(self, calibration: Calibration, k: float, params: Iterable[nn.Parameter]) -> None:
        self.cal, self.k, self.log = calibration, k, SlotLog()
        self.params = [p for p in params if p.requires_grad]
        assert len(self.params) == len(calibration.grad_ready_s), "the calibration is of another model"
        self.started = self.backward_start = self.slot_end = self.others_at_start = 0.0
        self.handles = [p.register_post_accumulate_grad_hook(self._hook(i)) for i, p in enumerate(self.params)]

    def _hook(self, index: int):  # type: ignore[no-untyped-def]  # a torch hook
        def ready(_: torch.Tensor) -> None:
            self.until(self.backward_start + self.k * self.cal.grad_ready_s[index])
        return ready

    @staticmethod
    def others_cpu_s() -> float:
        """CPU seconds this process's threads but the calling one have used."""
        return time.process_time() - time.thread_time()

    def _start(self) -> None:
        self.started, self.others_at_start = time.perf_counter(), self.others_cpu_s()

    def until(self, deadline: float) -> None:
        """Sleep to `deadline` (perf_counter seconds) plus k x the other threads' CPU since the phase began, and
        record how late the slot really ended. A deadline the previous slot's end already passed (gradients of one
        offset) is no slot of its own."""
        deadline += self.k * (self.others_cpu_s() - self.others_at_start)
        if deadline <= self.slot_end:
            return
        now = time.perf_counter()
        if now >= deadline:
            self.log.overruns += 1
        else:
            time.sleep(deadline - now)
            self.log.slept_s += deadline - now
        self.slot_end = time.perf_counter()
        self.log.late_s.append(self.slot_end - deadline)

    def _phase(self, previous_s: float) -> None:
        """Close the phase that lasted `previous_s` alone (since self.started) and open the next one."""
        if previous_s:
            self.until(self.started + self.k * previous_s)
        self._start()

    def data(self) -> None:
        self._start()

    def forward(self) -> None:
        self._phase(self.cal.data_s)

    def backward(self) -> None:
        self._phase(self.cal.forward_s)
        self.backward_start = self.started

    def opt(self) -> None:
        self._start()

    def end(self) -> None:
        self._phase(self.cal.opt_s)

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()
