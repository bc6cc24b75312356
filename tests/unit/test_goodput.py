"""bench/goodput.py's figures: the conversion is standard Ethernet frames' payload share over the repeats that held
their rate; every measured frame size gets its own."""
import pytest

from bench.goodput import figures


def row(mtu, shares, faithful=True, mbit=100):
    return {"mtu": mtu, "link_mbit": mbit, "payload_share_by_stream": shares, "faithful": faithful}


def test_the_conversion_is_standard_frames_and_each_frame_size_has_its_own_share():
    found = figures([row(1500, [0.92, 0.94]), row(9000, [0.98, 0.99]), row(1500, [0.5], faithful=False)])
    assert found["payload_share"] == pytest.approx(0.93)  # the unfaithful repeat is not counted, jumbo frames apart
    assert found["by_mtu"]["9000"]["payload_share"] == pytest.approx(0.985)
    assert found["by_mtu"]["1500"]["payload_share"] == pytest.approx(0.93)
    assert found["not_counted"] == 1 and found["by_mtu"]["9000"]["not_counted"] == 0
