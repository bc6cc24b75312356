"""hivemind's cost model: epochs of local steps, matchmaking and a butterfly all-reduce (strategies/hivemind.py)."""
import math

from metrics.summary.bounds import Round
from metrics.projection.cost import Cost, CostModel


class HivemindCost(CostModel):
    @classmethod
    def link_bound(cls, r: Round) -> float:
        """P/B: in hivemind's butterfly all-reduce every peer sends each other owner its part and
        gets back the average of its own, so its link carries its payload P each way (P is measured
        per peer, for any group size or load balance); B = the link rate."""
        return r.payload / r.rate

    @classmethod
    def rounds_overlap(cls, knobs: dict) -> bool:
        """Delayed averaging runs a round in the background while the next epoch trains."""
        return bool(knobs.get("delay_state_averaging") or knobs.get("delay_grad_averaging"))

    @classmethod
    def step_time(cls, m: Cost) -> float:
        """compute + E/k: k = max(1, ceil(target_batch_size / (N·batch))) local steps per epoch, E = the epoch's
        exposed averaging, with c = compute, T = matchmaking_time, a = average_state_every and A = 2(g-1)/g·S/β + 2α
        one all-reduce in groups of g peers (hivemind.target_group_size where set, else N). Gradient averaging:
        E = W + A (+ T/a without delay_state_averaging), W = j·c + T - k·c with j = max(1, ceil(k - T/c)).
        Local updates: E = (T + A)/a, with delay_state_averaging max(0, T + A - c)/a."""
        knobs = m.knobs
        matchmaking, compute = float(knobs["matchmaking_time"]), m.compute
        group = min(m.workers, int(knobs.get("target_group_size") or m.workers))
        allreduce = 2 * (group - 1) / group * m.size / m.rate + 2 * m.latency
        state_every = int(knobs.get("average_state_every", 1))
        delayed_state = bool(knobs.get("delay_state_averaging", True))
        steps_per_epoch = max(1, math.ceil(int(knobs["target_batch_size"]) / (m.workers * m.batch)))
        if knobs.get("use_local_updates"):
            state_round = max(0.0, matchmaking + allreduce - compute) if delayed_state else matchmaking + allreduce
            return compute + state_round / state_every / steps_per_epoch
        # the step after which matchmaking starts: the first that leaves at most T to the epoch's end
        scheduled_after = 1 if compute <= 0 else max(1, math.ceil(round(steps_per_epoch - matchmaking / compute, 9)))
        waited = scheduled_after * compute + matchmaking - steps_per_epoch * compute
        state_matchmaking = 0.0 if delayed_state else matchmaking / state_every
        return compute + (waited + allreduce + state_matchmaking) / steps_per_epoch

    @classmethod
    def averaged_bytes(cls, r: Round) -> float:
        """S = P·N/(2(N-1)): the butterfly all-reduce moves 2(N-1)/N·S per peer and direction."""
        return r.payload * r.workers / (2 * (r.workers - 1))
