"""ps's cost model: the servers' in-cast, update and replies (strategies/ps.py)."""
from dataclasses import replace

from metrics.summary.bounds import Round
from metrics.projection.cost import Cost, CostModel


class ParameterServerCost(CostModel):
    @classmethod
    def link_bound(cls, r: Round) -> float | None:
        """sync: 2·max(P, N·P/k)/B; async: max(P, N·P/k)/B (P = S per worker, k = ps.servers).

        Each of the k server links carries N·S/k per direction per round (the shards are
        balanced by size), and each worker link carries S. In sync mode a server can send the
        new parameters only after every push has arrived, so the two directions follow each
        other; in async mode pushes and pulls of different workers overlap. Needs equal links
        (a server's rate is not a worker's otherwise): None for mixed rates.
        """
        if not r.uniform_links:
            return None
        servers = int(r.knobs.get("servers", 1))
        one_way = max(r.payload, r.workers * r.payload / servers) / r.rate
        return 2 * one_way if r.knobs.get("mode", "sync") == "sync" else one_way

    @classmethod
    def rounds_overlap(cls, knobs: dict) -> bool:
        """The replies of one round overlap the next round's first pushes; async rounds are not rounds at all."""
        return True

    @classmethod
    def step_time(cls, m: Cost) -> float:
        """sync: compute + u + max(2S/β, (2N - φ(N-1))·S/(kβ)) + (2N+1)·α; async: compute + 2α + max(2S/β + u,
        N·(S/(kβ) + u)). k = ps.servers, u = a server's update (measured), φ = the share of replies that overlapped
        the next pushes (fitted on the calibration run, fit_overlap).

        sync, one round at a server: the in-cast (N pushes of S/k bytes on its downlink, N·S/(kβ)),
        one update (u: the weighted mean of N gradients and the optimizer step), then a reply to
        each worker in turn (N·S/(kβ) on its uplink). A worker that got its reply computes (in the
        `compute` of its step) and pushes again; its push can cross the server's later replies
        (both directions of a link are independent), so up to N-1 replies hide behind the next
        round's pushes: φ·(N-1)·S/(kβ) is saved. How much depends on how much of a reply the socket
        buffers hold when the server turns to receiving (its next receive is posted only after its
        last reply was handed over), which this model does not derive: φ is fitted on the
        calibration run and assumed the same at other N. A worker's own link carries S each way
        (2S/β when k servers share the in-cast). Latency: each push waits for the server's
        ready notice and then travels (2α, N pushes in turn) and the last reply travels once (α).
        async: a server updates and replies to each push on its own: its loop handles N pushes per
        round (N·(S/(kβ) + u)), while a worker pushes, waits for its reply and the update (2S/β + u).
        """
        servers = int(m.knobs.get("servers", 1))
        shard_s = m.size / (servers * m.rate)
        n = m.workers
        if m.knobs.get("mode", "sync") == "sync":
            return (m.compute + m.server + max(2 * m.size / m.rate, (2 * n - m.overlap * (n - 1)) * shard_s)
                    + (2 * n + 1) * m.latency)
        return m.compute + 2 * m.latency + max(2 * m.size / m.rate + m.server, n * (shard_s + m.server))

    @classmethod
    def fit_overlap(cls, m: Cost, step_s: float) -> float:
        """φ that makes the sync model meet the calibration run's own mean step (0 <= φ <= 1; async and N = 1: 0)."""
        if m.knobs.get("mode", "sync") != "sync" or m.workers < 2:
            return 0.0
        unhidden = cls.step_time(replace(m, overlap=0.0))
        share = (unhidden - step_s) / ((m.workers - 1) * m.size / (int(m.knobs.get("servers", 1)) * m.rate))
        return min(1.0, max(0.0, share))
