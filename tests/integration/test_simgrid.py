"""bench/simgrid.py: the message schedules SimGrid runs, against times worked out by hand."""
import pytest

from bench.simgrid import import_simgrid, simulate_apart

pytestmark = pytest.mark.integration  # each simulation runs in a process of its own (one SimGrid engine each)

MB4 = 4_000_000          # bytes
RATE = 100e6 / 8         # 100 Mbit/s in bytes/s


def simgrid_or_skip() -> None:
    try:
        import_simgrid()
    except RuntimeError as exc:
        pytest.skip(str(exc))


def one_round(model: str, schedule: str, latency_ms: float = 0.0) -> float:
    case = {"schedule": schedule, "workers": 4, "size": MB4, "mbit": 100, "latency_ms": latency_ms}
    return simulate_apart(model, [case])[0]


@pytest.mark.timeout(60)
def test_ring_all_reduce_takes_2_n_minus_1_steps_of_s_over_n():
    """4 hosts: 6 steps of S/4 = 1 MB over 100 Mbit/s links, 0.08 s each: 0.48 s; with 5 ms one way, + 6 x 5 ms."""
    simgrid_or_skip()
    assert one_round("max-min", "ring_allreduce") == pytest.approx(0.48, rel=1e-3)
    assert one_round("max-min", "ring_allreduce", latency_ms=5) == pytest.approx(0.48 + 6 * 0.005, rel=1e-3)


@pytest.mark.timeout(60)
def test_ps_receives_one_push_at_a_time_then_replies_to_all():
    """4 workers: 4 pushes of 4 MB in turn (0.32 s each) on the server's link, then 4 replies sharing its uplink
    (1.28 s): 2.56 s; with 5 ms one way, each push waits for a notice (2 x 5 ms) and the replies arrive 5 ms later."""
    simgrid_or_skip()
    assert one_round("max-min", "ps_sync") == pytest.approx(2.56, rel=1e-3)
    assert one_round("max-min", "ps_sync", latency_ms=5) == pytest.approx(2.56 + 9 * 0.005, rel=1e-3)


@pytest.mark.timeout(60)
def test_tcp_without_slow_start_costs_headers_and_acknowledgements():
    """The README's explanation of the tcp_warm column: LV08 gives a flow 97 % of the link, and in a ring every
    link also carries the acknowledgements of the flow arriving on its other direction (5 % of it): 0.48 x 1.05 /
    0.97. A ps push has no flow the other way: 2.56 / 0.97."""
    simgrid_or_skip()
    assert one_round("tcp_warm", "ring_allreduce") == pytest.approx(0.48 * 1.05 / 0.97, rel=5e-3)
    assert one_round("tcp_warm", "ps_sync") == pytest.approx(2.56 / 0.97, rel=5e-3)
