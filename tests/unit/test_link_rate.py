"""bench/link_rate.py's rule (unit tier): which candidate rate may be the default link's, from rows shaped as its
measurements write them."""
import pytest

from bench.link_rate import choose, judged

pytestmark = pytest.mark.timeout(30)


def row(rate: float, carried: float, comm: dict, link_faithful=True, cpu_faithful=True) -> dict:
    runs = {name: {"comm_share": share, "link": {"faithful": link_faithful}, "cpu_faithful": cpu_faithful}
            for name, share in comm.items()}
    return {"rate_mbit": rate, "probe_busy": {"worst_carried_share": carried}, "runs": runs}


def test_a_rate_fits_only_where_the_link_held_the_peers_kept_their_cpu_and_communication_weighs():
    rows = [judged(row(150, 0.99, {"ring": 0.4, "ps": 0.8}), 0.95, 0.5),
            judged(row(200, 0.97, {"ring": 0.3, "ps": 0.7}, cpu_faithful=False), 0.95, 0.5),  # the wire took a core
            judged(row(300, 0.90, {"ring": 0.3, "ps": 0.7}), 0.95, 0.5),                      # the probe fell short
            judged(row(400, 0.99, {"ring": 0.2, "ps": 0.7}, link_faithful=False), 0.95, 0.5),  # a run's link did not
            judged(row(500, 0.99, {"ring": 0.2, "ps": 0.4}), 0.95, 0.5)]                      # communication too light
    assert [r["fits"] for r in rows] == [True, False, False, False, False]
    assert rows[0]["heaviest"] == "ps" and rows[0]["heaviest_comm_share"] == 0.8
    assert choose(rows, 0.95, 0.5)["rate_mbit"] == 150
    assert judged(row(200, 0.97, {"ring": 0.3, "ps": 0.7}, cpu_faithful=None), 0.95, 0.5)["fits"]  # not judged: kept
