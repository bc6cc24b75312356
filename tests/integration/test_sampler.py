"""The resource sampler sums a process and its children."""
import subprocess
import sys
import time

import pytest

from metrics.recording.jsonl import read_jsonl
from metrics.recording.sampler import ResourceSampler


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_sampler_counts_children(tmp_path):
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        sampler = ResourceSampler(tmp_path / "res.jsonl", interval=0.2)
        sampler.start()
        time.sleep(1.2)
        sampler.stop()
    finally:
        busy.kill()
        busy.wait()
    records = read_jsonl(tmp_path / "res.jsonl")
    assert len(records) >= 4
    keys = {"t", "cpu_percent", "rss_bytes", "read_bytes", "write_bytes", "threads", "procs",
            "net_rx_bytes", "net_tx_bytes", "lo_rx_bytes", "lo_tx_bytes"}
    assert keys <= set(records[0])
    assert max(r["procs"] for r in records) >= 2
    assert max(r["cpu_percent"] for r in records[1:]) > 50  # the busy child shows up
    assert all(r["rss_bytes"] > 10e6 for r in records)
