"""The resource sampler sums a process and its children."""

import pytest

from metrics.recording.sampler import read_net_dev


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
