"""The resource sampler sums a process and its children."""
import subprocess
import sys
import time

import pytest

from metrics.recording.jsonl import read_jsonl
from metrics.recording.sampler import ResourceSampler, read_net_dev


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


@pytest.mark.timeout(30)
def test_net_dev_has_loopback():
    assert "lo" in read_net_dev()


NET_DEV = """\
Inter-|   Receive                                         |  Transmit
 face |bytes  packets errs drop fifo frame compressed multicast|bytes  packets errs drop fifo colls carrier compressed
    lo:  123456  100  0  0  0  0  0  0   123456  100  0  0  0  0  0  0
  eth0: 9876543 5000  0  0  0  0  0  0  1234567 4000  0  0  0  0  0  0
"""


@pytest.mark.timeout(30)
def test_net_dev_columns_are_receive_and_transmit_bytes(tmp_path):
    (tmp_path / "dev").write_text(NET_DEV)
    assert read_net_dev(str(tmp_path / "dev")) == {"lo": (123456, 123456), "eth0": (9876543, 1234567)}
