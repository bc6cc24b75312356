"""Sampler overhead: CPU time of the sampler thread at 2 Hz over a peer-like process tree."""
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from metrics.recording.sampler import ResourceSampler


def thread_cpu_s(native_id: int) -> float:
    thread = next(t for t in psutil.Process().threads() if t.id == native_id)
    return thread.user_time + thread.system_time


def run(seconds: float = 20.0, interval: float = 0.5, children: int = 4) -> dict:
    kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]) for _ in range(children)]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sampler = ResourceSampler(Path(tmp) / "resources.jsonl", interval)
            sampler.start()
            assert sampler.native_id is not None  # a started thread has one
            start_cpu, start = thread_cpu_s(sampler.native_id), time.monotonic()
            time.sleep(seconds)
            used, wall = thread_cpu_s(sampler.native_id) - start_cpu, time.monotonic() - start
            sampler.stop()
    finally:
        for kid in kids:
            kid.kill()
            kid.wait()
    return {
        "name": "sampler_overhead",
        "ratio": used / wall,
        "goal": "< 0.01 of one core",
        "cpu_s": used,
        "wall_s": wall,
        "setup": f"interval={interval}s ({1 / interval:g} Hz), {children} child processes, {seconds:g} s",
    }
