"""Lower bounds of one averaging round (each strategy's cost model's link_bound) and link efficiency
(metrics.summary.bounds) on synthetic step records (unit tier). Expected values are derived
here from the hops each algorithm needs, not from the formulas in the code."""
import pytest

from helpers import cost_model_of, strategy_names, strategy_of
from metrics.summary.bounds import MBIT, LinkBound, Round, link_efficiency, round_records
from strategies.cost_models.allreduce import AllReduceCost
from strategies.cost_models.hivemind import HivemindCost
from strategies.cost_models.ps import ParameterServerCost
from strategies.cost_models.ring import RingCost
from strategies.cost_models.stepwise import StepwiseCost

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
    bound = StepwiseCost.link_bound(Round(payload=S, workers=workers, rate=B, knobs={"chunks": chunks}))
    assert bound == pytest.approx(hops_of_s * T)


@pytest.mark.parametrize("workers, chunks, hops_of_s", [
    (2, 1, 2.0),    # 0 -> 1, then the sum back 1 -> 0
    (2, 4, 1.25),   # the way back starts with the first chunk: S, then the last chunk's hop back (S/4)
    (3, 1, 4.0),    # reduce 0 -> 1 -> 2, broadcast 2 -> 0 -> 1: four hops of S
    (4, 1, 6.0),    # 2(N-1) hops of S
    (4, 100, 2.0),  # fine chunks: a middle worker's uplink carries 2S (its sum, then the full sum)
])
def test_stepwise_second_pass(workers, chunks, hops_of_s):
    # P, the largest payload of one worker: 2S with the broadcast pass, a middle worker sending its sum and then
    # forwarding the full sum; at N = 2 there is no middle worker: each sends S once (ring_round, tests/helpers.py)
    payload = S if workers == 2 else 2 * S
    bound = StepwiseCost.link_bound(Round(payload=payload, workers=workers, rate=B,
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
    bound = ParameterServerCost.link_bound(Round(payload=S, workers=workers, rate=B,
                                             knobs={"servers": servers, "mode": mode}))
    assert bound == pytest.approx(expected)


def test_ps_has_no_bound_over_mixed_links():
    assert ParameterServerCost.link_bound(Round(S, 4, B, {"servers": 2, "mode": "sync"}, uniform_links=False)) is None


# --- all-reduce family: each worker's link carries its payload P each way -------------------------
ALLREDUCE_PAYLOAD = 2 * 3 / 4 * S  # an all-reduce of S over 4 workers: 2(N-1)/N x S per worker and direction


def allreduces(name: str) -> bool:
    """The strategy's payload relation is an all-reduce's: P = 2(N-1)/N x S."""
    return cost_model_of(name).averaged_bytes(Round(ALLREDUCE_PAYLOAD, 4, B)) == pytest.approx(S)


ALLREDUCE_FAMILY = [name for name in strategy_names() if allreduces(name)]


@pytest.mark.parametrize("name", ALLREDUCE_FAMILY)
def test_allreduce_family_is_payload_over_rate(name):
    assert cost_model_of(name).link_bound(Round(payload=ALLREDUCE_PAYLOAD, workers=4, rate=B)) == pytest.approx(1.5 * T)


def test_allreduce_family_is_found_in_the_registry():
    assert {"allreduce", "diloco", "hivemind", "localsgd", "ring"} <= set(ALLREDUCE_FAMILY)


@pytest.mark.parametrize("name", strategy_names())
def test_every_averaging_strategy_states_its_formula_and_baselines_none(name):
    strategy = strategy_of(name)
    model = cost_model_of(name)
    if strategy.is_baseline:
        assert model.link_bound(Round(S, 1, B)) is None and model.bound_formula() is None
    else:
        assert model.bound_formula() and model.link_bound(Round(S, 4, B)) > 0


def test_stepwise_formula_is_stated():
    assert StepwiseCost.bound_formula().startswith("One pass: S/B·(1 + (N-2)/c)")


# --- link floors and efficiency ------------------------------------------------------------------
MB_RATE = 8.0  # Mbit/s: 1 MB/s
MB = 1e6


def record(step, sent, recv, comm_s, round_id=None, ended_at=None, opt_s=0.0, samples=None, **extra):
    return {"step": step, "bytes_sent": sent, "bytes_recv": recv, "comm_s": comm_s, "opt_s": opt_s,
            "round": round_id, "ended_at": float(step) if ended_at is None else ended_at,
            "samples": 32 * step if samples is None else samples, **extra}


def synchronous(steps, rates):
    return link_efficiency(LinkBound(), steps, rates)


def test_link_rate_unit():
    assert MB_RATE * MBIT == 1e6


def test_round_one_is_left_out_and_each_round_ends_with_its_slowest_worker():
    steps = {0: [record(1, MB, MB, 9.0), record(2, MB, MB, 1.0), record(3, MB, MB, 1.25)],
             1: [record(1, MB, MB, 9.0), record(2, MB, MB, 1.1), record(3, MB, MB, 2.0)]}
    result = synchronous(steps, [MB_RATE, MB_RATE])
    # rounds 2 and 3: floors 1 s + 1 s; measured: each round's slowest worker, 1.1 s + 2.0 s
    assert result["rounds"] == 2
    assert result["bound_s_per_round"] == pytest.approx(1.0)
    assert result["measured_s_per_round"] == pytest.approx(3.1 / 2)
    assert result["efficiency"] == pytest.approx(2 / 3.1)


def test_each_link_has_its_own_rate():
    """Rank 0 on 1 MB/s sends 0.5 MB (0.5 s); rank 1 on 2 MB/s sends 2 MB (1 s): the floor is 1 s, set by the
    faster link that carries more. The payload over the slowest rate (2 MB at 1 MB/s = 2 s) is no floor: the
    round below took 1.25 s."""
    steps = {r: [record(1, MB, MB, 5.0), record(2, sent, sent, 1.25)] for r, sent in ((0, 0.5 * MB), (1, 2 * MB))}
    result = synchronous(steps, [MB_RATE, 2 * MB_RATE])
    assert result["bound_s_per_round"] == pytest.approx(1.0) and result["busiest_link_rank"] == 1
    assert result["efficiency"] == pytest.approx(0.8)


def test_an_unshaped_link_sets_no_floor_of_its_own():
    steps = {r: [record(1, MB, MB, 5.0), record(2, MB, MB, 2.0)] for r in range(2)}
    result = synchronous(steps, [None, MB_RATE])
    assert result["busiest_link_rank"] == 1 and result["efficiency"] == pytest.approx(0.5)
    assert "no link is shaped" in synchronous(steps, [None, None])["why"]


def test_rounds_are_grouped_by_their_round_field_not_by_step_number():
    # round 7 (after round 6, left out) logged by worker 0 at its step 3 and by worker 1 at its step 5
    steps = {0: [record(1, MB, 0, 1.0, round_id=6), record(2, 0, 0, 0.0), record(3, 2 * MB, 0, 2.0, round_id=7)],
             1: [record(4, 0, MB, 1.0, round_id=6), record(5, 0, MB, 3.0, round_id=7)]}
    result = synchronous(steps, [MB_RATE, MB_RATE])
    assert result["rounds"] == 1  # steps without payload are no round
    assert result["bound_s_per_round"] == pytest.approx(2.0)     # the busiest link: worker 0's 2 MB out
    assert result["measured_s_per_round"] == pytest.approx(3.0)  # its slowest worker


def test_link_time_of_an_overlapping_strategy_is_used_instead_of_exposed_comm():
    # DDP and Horovod hide communication behind backward: comm_s is tiny, link_s is the transfers' span
    steps = {0: [record(1, MB, MB, 0.0), record(2, MB, MB, 0.01, link_s=1.25)],
             1: [record(1, MB, MB, 0.0), record(2, MB, MB, 0.02, link_s=1.0)]}
    result = synchronous(steps, [MB_RATE, MB_RATE])
    assert result["measured_s_per_round"] == pytest.approx(1.25) and result["efficiency"] == pytest.approx(0.8)


def test_known_idle_time_is_not_link_time():
    steps = {r: [record(1, MB, MB, 9.0), record(2, MB, MB, 2.5, link_idle_s=0.5 + r)] for r in range(2)}
    # the parameter server's update (0.5 s for one worker, 1.5 s seen by the other) carries no bytes: the least
    # of them is taken off, so the floor is never compared with less than the link could have been busy
    assert synchronous(steps, [MB_RATE, MB_RATE])["measured_s_per_round"] == pytest.approx(2.0)


def ps_overlapping_log(rounds: int = 5) -> dict:
    """A synchronous parameter server (rank 2, logs no steps) and 2 workers on 1 MB/s links, each pushing and
    pulling 1 MB per round. The server's link carries 2 MB each way per round: 2 s. Worker 0's exchange runs in
    [2k, 2k+1], worker 1's in [2k+1, 2k+2]: the replies to one round overlap the next round's pushes, so a round
    repeats every 2 s although no worker spends more than 1 s in it."""
    return {w: [record(k, MB, MB, 1.0, round_id=k, ended_at=2 * k + 1 + w, peer_bytes={2: [MB, MB]})
                for k in range(1, rounds + 1)] for w in range(2)}


def test_efficiency_of_overlapping_rounds_is_a_link_busy_measure_at_most_one():
    steps = ps_overlapping_log()
    isolated = ParameterServerCost.link_bound(Round(MB, 2, MB, {"servers": 1, "mode": "sync"}))
    # the isolated round's latency (4 s: 2 MB in, then 2 MB out) is longer than any worker's exchange (1 s)
    assert isolated == pytest.approx(4.0) and isolated > max(s["comm_s"] for s in steps[0])
    result = link_efficiency(LinkBound({"servers": 1, "mode": "sync"}, ParameterServerCost.link_bound,
                                       ParameterServerCost.bound_formula(), True), steps, [MB_RATE] * 3)
    # rounds 2..5: the server link carries 8 MB (8 s) within [4 s: worker 0 starts round 2, 12 s: worker 1 ends 5]
    assert result["busiest_link_rank"] == 2 and result["floor_s"] == pytest.approx(8.0)
    assert result["measured_s"] == pytest.approx(8.0) and result["efficiency"] == pytest.approx(1.0)
    assert result["isolated_round"]["latency_s_per_round"] == pytest.approx(4.0)  # stated, not an efficiency
    # the aggregate bound: 4 rounds x 2 workers x 32 samples over the 8 s the busiest link needs
    assert result["throughput_bound_samples_per_s"] == pytest.approx(32.0)


def test_the_same_log_measured_round_by_round_would_exceed_one():
    """Why overlapping rounds need the span: per round the floor (2 s) is longer than the longest exchange (1 s)."""
    result = synchronous(ps_overlapping_log(), [MB_RATE] * 3)
    assert result["efficiency"] == pytest.approx(2.0)


def test_strategies_say_whose_rounds_overlap():
    assert StepwiseCost.rounds_overlap({}) and ParameterServerCost.rounds_overlap({"mode": "async"})
    assert not AllReduceCost.rounds_overlap({}) and not RingCost.rounds_overlap({})
    assert HivemindCost.rounds_overlap({"delay_state_averaging": True})
    assert not HivemindCost.rounds_overlap({"delay_state_averaging": False, "delay_grad_averaging": False})


def test_no_floor_without_two_rounds():
    steps = {0: [record(1, MB, MB, 1.0)]}
    assert "fewer than 2" in synchronous(steps, [MB_RATE])["why"]
    assert synchronous({}, [MB_RATE])["why"] == "no steps were logged"


def test_the_collectives_benchmark_fails_on_an_efficiency_above_one():
    from bench.collectives import check_at_most_one

    check_at_most_one([{"strategy": "ps", "efficiency": 1.0}, {"strategy": "hivemind", "efficiency": None}])
    with pytest.raises(AssertionError, match="above 1"):
        check_at_most_one([{"strategy": "stepwise", "efficiency": 1.32}])


def test_round_ids_and_step_numbers_are_separate_rounds():
    """hivemind: epoch 2's round (round=2) and a background round finishing at step 2 (round=None) are two rounds."""
    steps = {0: [{"step": 1, "round": None, "bytes_sent": 0, "bytes_recv": 0, "samples": 32},
                 {"step": 2, "round": None, "bytes_sent": 5, "bytes_recv": 5, "samples": 64},
                 {"step": 3, "round": 2, "bytes_sent": 7, "bytes_recv": 7, "samples": 96}]}
    rounds = round_records(steps)
    assert sorted(len(records) for records in rounds.values()) == [1, 1]
    assert sorted(r[0]["bytes_sent"] for r in rounds.values()) == [5, 7]
