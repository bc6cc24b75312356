"""The gradient clock on a shared core (integration tier: it starts a competing process): a wait for the CPU
during forward and backward is not compute (job/loop.py GradientClock)."""
import os
import subprocess
import sys
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


@pytest.mark.skipif(not os.path.exists("/proc/thread-self/schedstat"), reason="needs schedstat")
def test_waiting_for_a_shared_core_is_not_compute():
    """A busy process on the training thread's one core doubles the span of backward, not its compute_s: the
    wait for the core (on a peer's core: its communication threads) is left to exposed communication."""
    core, allowed, threads = min(os.sched_getaffinity(0)), os.sched_getaffinity(0), torch.get_num_threads()
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(6)])
    x = torch.randn(512, 512)
    clock = GradientClock(net.parameters(), CPU)
    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    spinner = None
    try:
        alone = median_step(net, clock, x)
        spinner = subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{core}}})\n"
                                    "while True: pass"])
        time.sleep(0.3)
        shared = median_step(net, clock, x)
    finally:
        if spinner:
            spinner.kill()
            spinner.wait()
        os.sched_setaffinity(0, allowed)
        torch.set_num_threads(threads)
        clock.close()
    assert shared[0] > 1.5 * alone[0], (alone, shared)  # the core was shared: backward took longer
    assert shared[2] > 0.3 * shared[0], (alone, shared)  # mostly waiting for it
    assert shared[1] < 1.3 * alone[1], (alone, shared)   # compute_s as with the core alone
