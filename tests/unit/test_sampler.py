"""The resource sampler sums a process and its children; the wire counter's drain after training."""
import threading
import time

import pytest

from metrics.recording import sampler
from metrics.recording.sampler import read_net_dev, unacknowledged_bytes


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


def tcp_table(*tx_queues: int) -> str:
    """/proc/net/tcp with one socket per tx_queue (the first a listener)."""
    rows = [f"   {i}: 0100007F:{5000 + i:04X} 0100007F:1F90 {'0A' if i == 0 else '01'} {tx:08X}:00000000 00:00000000 "
            f"00000000     0        0 {1000 + i} 1 0000000000000000 100 0 0 10 0" for i, tx in enumerate(tx_queues)]
    return "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" + \
        "\n".join(rows) + "\n"


@pytest.mark.timeout(30)
def test_unacknowledged_bytes_sum_the_sockets_tx_queues(tmp_path):
    (tmp_path / "tcp").write_text(tcp_table(0, 1024, 31))
    (tmp_path / "tcp6").write_text(tcp_table(0, 16))
    assert unacknowledged_bytes((str(tmp_path / "tcp"), str(tmp_path / "tcp6"), str(tmp_path / "absent"))) == 1071


@pytest.fixture
def chattering(monkeypatch):
    """An interface that never goes quiet (Horovod's negotiation): 100 more bytes sent at every reading."""
    readings = iter(range(0, 10**9, 100))
    monkeypatch.setattr(sampler, "net_totals", lambda: {"net_tx_bytes": next(readings), "net_rx_bytes": 0})


@pytest.mark.timeout(30)
def test_drain_reads_as_soon_as_every_byte_is_acknowledged(tmp_path, chattering):
    (tmp_path / "tcp").write_text(tcp_table(0, 0))
    started = time.monotonic()
    sampler.WireCounter().drained(timeout_s=3.0, sockets=(str(tmp_path / "tcp"),))
    assert time.monotonic() - started < 1.0  # not the 3 s a quiet interface would take here


@pytest.mark.timeout(30)
def test_drain_waits_for_the_last_acknowledgement(tmp_path, chattering):
    table = tmp_path / "tcp"
    table.write_text(tcp_table(0, 4096))
    acknowledged = threading.Timer(0.3, lambda: table.write_text(tcp_table(0, 0)))
    started = time.monotonic()
    acknowledged.start()
    sampler.WireCounter().drained(timeout_s=3.0, sockets=(str(table),))
    assert 0.3 <= time.monotonic() - started < 2.0
