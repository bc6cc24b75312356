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
        Local updates: E = (T + A)/a, with delay_state_averaging max(0, T + A - c)/a.

        Derived from hivemind 1.1.12's source (optim/optimizer.py, optim/state_averager.py, averaging/). An
        epoch ends at the first step after which the swarm holds target_batch_size samples
        (ProgressTracker.ready_to_update_epoch): with N peers stepping together, k whole steps of c.

        Gradient rounds are pre-scheduled: after each step, Optimizer._maybe_schedule_gradient_averaging starts
        matchmaking once the tracker's estimate of the epoch's end is at most T away. schedule_step leaves
        scheduled_time at its default, now + min_matchmaking_time (= T; the estimate is only logged), the
        averager declares that time, and the group's leader (the member that declared earliest) assembles the
        group then. With an exact estimate matchmaking starts after step j, the first that leaves at most T
        (never before the epoch's first step ends), and the epoch's last step waits W for the group: T - (k-1)·c
        when the epoch is shorter than T + c (all of T when an epoch is one step), less than one step
        otherwise. The tracker refreshes its estimate every 0.5-10 s and has none just after an epoch: an
        estimate that comes late starts matchmaking later and exposes more.

        State rounds (every a epochs) are never pre-scheduled in 1.1.12: _maybe_schedule_state_averaging
        returns while delay_before_state_averaging has no sample, which only a pre-scheduled round gives. Their
        matchmaking starts at the epoch's end. Without delay_state_averaging the step waits for the round: T
        and its all-reduce. With it (the default) the round runs in the state averager's background executor:
        in gradient mode the next epoch, which lasts at least c + T + A, hides its matchmaking (its bytes are
        part of S as measured); with local updates the next step's optimizer call waits for every pending
        round (StateAverager.step: wait_for_delayed_updates defaults to true for an optimizer step under the
        delta rule), so only that step's compute hides it: max(0, T + A - c).

        All-reduce: each peer owns 1/g of the S bytes, sends the other g-1 owners their parts at once and gets
        back the average of its own part, so its link carries 2(g-1)/g·S each way and the messages of each half
        go in parallel: 2α, not (g-1)·α. Groups average at the same time on their own links. avgbench sets no
        target group size, and the runs measured whole-swarm groups in 96-97 % of rounds at 8 peers (lab log,
        2026-11-23), so g = N. S is what the averagers moved per round as measured (gradients, and parameters of
        synchronous state rounds); background rounds are not charged for the CPU they take.
        """
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
