"""Lower bounds of one averaging round (each strategy's link_bound) and link efficiency
(metrics.bounds) on synthetic step records (unit tier). Expected values are derived
here from the hops each algorithm needs, not from the formulas in the code."""
import pytest

from metrics.bounds import MBIT, Round, link_efficiency
from strategies.allreduce import AllReduce
from strategies.hivemind import Hivemind
from strategies.ps import ParameterServer
from strategies.ring import Ring
from strategies.single import Single
from strategies.stepwise import Stepwise

pytestmark = pytest.mark.timeout(30)

S = 1_000_000.0  # bytes of the averaged vector
B = 250_000.0    # link rate, bytes/s per direction: S/B = 4 s
T = S / B


# --- stepwise: a chain of N-1 hops, c chunks pipelined along it ------------------------------
@pytest.mark.parametrize("workers, chunks, hops_of_s", [
    (2, 1, 1.0),    # one hop of S
    (2, 8, 1.0),    # one hop: chunking cannot help
    (4, 1, 3.0),    # no pipelining: 3 hops of S one after another
    (4, 4, 1.5),    # first worker's S, then the last chunk's 2 remaining hops of S/4
    (5, 2, 2.5),    # S + 3 hops of S/2
    (8, 6, 2.0),    # S + 6 hops of S/6
])
def test_stepwise_one_pass(workers, chunks, hops_of_s):
    bound = Stepwise.link_bound(Round(payload=S, workers=workers, rate=B, knobs={"chunks": chunks}))
    assert bound == pytest.approx(hops_of_s * T)


@pytest.mark.parametrize("workers, chunks, hops_of_s", [
    (2, 1, 2.0),    # 0 -> 1, then the sum back 1 -> 0
    (3, 1, 4.0),    # reduce 0 -> 1 -> 2, broadcast 2 -> 0 -> 1: four hops of S
    (4, 1, 6.0),    # 2(N-1) hops of S
    (4, 100, 2.0),  # fine chunks: a middle worker's uplink carries 2S (its sum, then the full sum)
])
def test_stepwise_second_pass(workers, chunks, hops_of_s):
    # P, the largest payload of one worker, is 2S with the broadcast pass
    bound = Stepwise.link_bound(Round(payload=2 * S, workers=workers, rate=B,
                                      knobs={"chunks": chunks, "second_pass": True}))
    assert bound == pytest.approx(hops_of_s * T)


# --- parameter server: k server links carry N shards of S/k each way ------------------------------
@pytest.mark.parametrize("workers, servers, mode, expected", [
    (4, 2, "async", 2 * T),   # each server link: 4 x S/2 = 2S one way, pushes and pulls overlap
    (4, 2, "sync", 4 * T),    # 2S in, then 2S out
    (4, 1, "sync", 8 * T),
    (2, 4, "async", 1 * T),   # servers outnumber workers: the worker's own link (S) is the limit
    (2, 4, "sync", 2 * T),
])
def test_ps(workers, servers, mode, expected):
    bound = ParameterServer.link_bound(Round(payload=S, workers=workers, rate=B,
                                             knobs={"servers": servers, "mode": mode}))
    assert bound == pytest.approx(expected)


def test_ps_has_no_bound_over_mixed_links():
    assert ParameterServer.link_bound(Round(S, 4, B, {"servers": 2, "mode": "sync"}, uniform_links=False)) is None


# --- all-reduce family: each worker's link carries its payload P each way -------------------------
@pytest.mark.parametrize("strategy", [Ring, AllReduce, Hivemind])
def test_allreduce_family_is_payload_over_rate(strategy):
    payload = 2 * 3 / 4 * S  # a ring all-reduce of S over 4 workers: 2(N-1)/N x S per worker
    assert strategy.link_bound(Round(payload=payload, workers=4, rate=B)) == pytest.approx(1.5 * T)


def test_formulas_are_stated_and_single_has_none():
    assert Single.link_bound(Round(S, 1, B)) is None and Single.bound_formula() is None
    assert Stepwise.bound_formula().startswith("One pass: S/B·(1 + (N-2)/c)")
    for strategy in (Ring, AllReduce, Hivemind, ParameterServer):
        assert strategy.bound_formula()


# --- link efficiency --------------------------------------------------------------------------------
MB_RATE = 8.0  # Mbit/s: 1 MB/s


def record(step, sent, recv, comm_s, round_id=None, **extra):
    return {"step": step, "bytes_sent": sent, "bytes_recv": recv, "comm_s": comm_s, "round": round_id, **extra}


def per_byte(r: Round) -> float:
    return r.payload / r.rate


def test_link_rate_unit():
    assert MB_RATE * MBIT == 1e6


def test_efficiency_is_at_most_one_when_every_round_takes_at_least_its_bound():
    steps = {0: [record(1, 1e6, 1e6, 1.0), record(2, 1e6, 1e6, 1.25)],
             1: [record(1, 1e6, 1e6, 1.1), record(2, 1e6, 1e6, 2.0)]}
    result = link_efficiency(per_byte, "P/B", {}, steps, [MB_RATE, MB_RATE])
    # bounds 1 s + 1 s; measured: each round's slowest worker, 1.1 s + 2.0 s
    assert result["rounds"] == 2 and result["link_mbit"] == pytest.approx(MB_RATE)
    assert result["bound_s_per_round"] == pytest.approx(1.0)
    assert result["measured_s_per_round"] == pytest.approx(3.1 / 2)
    assert result["efficiency"] == pytest.approx(2 / 3.1) and result["efficiency"] <= 1


def test_stepwise_at_the_physical_minimum_is_efficiency_one():
    """4 workers, 4 chunks: the chain cannot finish before S/B + 2 x S/(4B) = 1.5 s for 1 MB at 1 MB/s.
    A round measured at exactly that is efficiency 1 (a bound of (N-1) hops would claim more than 1)."""
    knobs = {"chunks": 4}
    steps = {r: [record(1, 1e6 if r < 3 else 0, 1e6 if r > 0 else 0, 1.5, round_id=0)] for r in range(4)}
    result = link_efficiency(Stepwise.link_bound, Stepwise.bound_formula(), knobs, steps, [MB_RATE] * 4)
    assert result["bound_s_per_round"] == pytest.approx(1.5)
    assert result["efficiency"] == pytest.approx(1.0)


def test_rounds_are_grouped_by_their_round_field_not_by_step_number():
    # one averaging round (round 7) that worker 0 logged at its step 3 and worker 1 at its step 5
    steps = {0: [record(1, 0, 0, 0.0), record(3, 2e6, 0, 2.0, round_id=7)],
             1: [record(5, 0, 1e6, 3.0, round_id=7)]}
    result = link_efficiency(per_byte, "P/B", {}, steps, [MB_RATE, MB_RATE])
    assert result["rounds"] == 1  # steps without payload are no round
    assert result["bound_s_per_round"] == pytest.approx(2.0)     # the round's largest payload: 2 MB
    assert result["measured_s_per_round"] == pytest.approx(3.0)  # its slowest worker
    assert result["efficiency"] == pytest.approx(2 / 3)


def test_without_a_round_field_the_step_number_is_the_round():
    steps = {0: [record(1, 1e6, 1e6, 1.0), record(2, 1e6, 1e6, 1.0)], 1: [record(1, 1e6, 1e6, 2.0)]}
    result = link_efficiency(per_byte, "P/B", {}, steps, [MB_RATE, MB_RATE])
    assert result["rounds"] == 2 and result["measured_s_per_round"] == pytest.approx(1.5)


def test_link_time_of_an_overlapping_strategy_is_used_instead_of_exposed_comm():
    # DDP and Horovod hide communication behind backward: comm_s is tiny, link_s is the transfer's span
    steps = {0: [record(1, 1e6, 1e6, 0.01, link_s=1.25)], 1: [record(1, 1e6, 1e6, 0.02, link_s=1.0)]}
    result = link_efficiency(per_byte, "P/B", {}, steps, [MB_RATE, MB_RATE])
    assert result["measured_s_per_round"] == pytest.approx(1.25)
    assert result["efficiency"] == pytest.approx(0.8)


def test_the_slowest_worker_link_sets_the_rate():
    steps = {0: [record(1, 1e6, 1e6, 2.0)], 1: [record(1, 1e6, 1e6, 2.0)]}
    result = link_efficiency(per_byte, "P/B", {}, steps, [2 * MB_RATE, MB_RATE])
    assert result["link_mbit"] == pytest.approx(MB_RATE) and result["bound_s_per_round"] == pytest.approx(1.0)


def test_no_bound_without_a_formula_or_shaped_links():
    steps = {0: [record(1, 1e6, 1e6, 1.0)]}
    assert link_efficiency(None, None, {}, steps, [MB_RATE])["bound"] is None
    assert "not shaped" in link_efficiency(per_byte, "P/B", {}, steps, [None])["why"]
    mixed = link_efficiency(ParameterServer.link_bound, "ps", {"servers": 1, "mode": "sync"},
                            {0: [record(1, 1e6, 1e6, 1.0)], 1: [record(1, 1e6, 1e6, 1.0)]},
                            [MB_RATE, MB_RATE, 2 * MB_RATE])  # the server's link differs
    assert mixed["bound"] is None and "does not cover" in mixed["why"]
