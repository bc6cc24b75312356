"""The gradient clock on a shared core (integration tier: it starts a competing process): a wait for the CPU
while the peer's own other threads run is not compute; a wait for other processes is (job/loop.py GradientClock)."""
import hashlib
import os
import subprocess
import sys
import threading
import time

import pytest
import torch

from job.device import PeerDevice
from job.loop import GradientClock

CPU = PeerDevice(torch.device("cpu"))

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def timed_step(net, clock, x):
    """(span from start to the last gradient, compute_s, wait_s) of one forward and backward."""
    clock.start()
    started = time.perf_counter()
    net(x).square().mean().backward()
    return clock.last_ready - started, clock.compute_s(started), clock.wait_s()


def median_step(net, clock, x, repeats=5):
    return sorted((timed_step(net, clock, x) for _ in range(repeats)), key=lambda r: r[0])[repeats // 2]


class Competitor:
    """Keeps one core busy: a thread of this process (as a peer's communication threads are; hashing releases the
    GIL) or another process."""

    def __init__(self, core: int, kind: str):
        self.core, self.kind, self.stop, self.ready = core, kind, threading.Event(), threading.Event()
        self.thread = self.process = None

    def _spin(self) -> None:
        os.sched_setaffinity(0, {self.core})  # this thread only
        self.ready.set()
        block = bytes(1 << 20)
        while not self.stop.is_set():
            hashlib.sha256(block).digest()

    def __enter__(self):
        if self.kind == "thread":
            self.thread = threading.Thread(target=self._spin, daemon=True)
            self.thread.start()
            assert self.ready.wait(10), "the competing thread did not start"
        else:  # it says when it is on the core, so no step is measured before it competes
            script = (f"import os\nos.sched_setaffinity(0, {{{self.core}}})\n"
                      "print('ready', flush=True)\nwhile True: pass")
            self.process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
            assert self.process.stdout.readline() == b"ready\n", "the competing process did not start"
        time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        self.stop.set()
        if self.thread:
            self.thread.join()
        if self.process:
            self.process.kill()
            self.process.wait()


@pytest.mark.skipif(not os.path.exists("/proc/thread-self/schedstat"), reason="needs schedstat")
def test_waiting_for_the_peers_own_threads_is_not_compute_but_waiting_for_others_is():
    """On the training thread's one core, a busy thread of its own process (a peer's communication threads) doubles
    backward's span but not compute_s: that wait is exposed communication. A busy other process (other load on the
    machine) stays in compute_s: it is not the strategy's cost."""
    core, allowed, threads = min(os.sched_getaffinity(0)), os.sched_getaffinity(0), torch.get_num_threads()
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(6)])
    x = torch.randn(512, 512)
    clock = GradientClock(net.parameters(), CPU)
    os.sched_setaffinity(0, {core})  # the training thread's affinity
    torch.set_num_threads(1)
    try:
        alone = median_step(net, clock, x)
        with Competitor(core, "thread"):
            own = median_step(net, clock, x)
        with Competitor(core, "process"):
            other = median_step(net, clock, x)
    finally:
        os.sched_setaffinity(0, allowed)
        torch.set_num_threads(threads)
        clock.close()
    # The core was shared, so backward took longer (about 2x; CI once saw 1.48x for the process): 1.3x still tells
    # "shared" from "alone". With its own thread, compute_s takes less than half the added span (the competing
    # thread also slows the training thread's own work a little: CI saw 1.32x); without the waits apart, all of it.
    for shared in (own, other):
        assert shared[0] > 1.3 * alone[0], (alone, own, other)
    assert own[2] > 0.3 * own[0], (alone, own)          # mostly waiting for the peer's own thread
    assert own[1] < alone[1] + 0.5 * (own[0] - alone[0]), (alone, own)
    assert other[2] < 0.1 * other[0], (alone, other)    # another process's use is not subtracted
    assert other[1] > 1.3 * alone[1], (alone, other)
