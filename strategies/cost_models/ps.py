"""ps's cost model: the servers' in-cast, update and replies (strategies/ps.py)."""
from dataclasses import replace

from metrics.summary.bounds import Round
from metrics.projection.cost import Cost, CostModel


class ParameterServerCost(CostModel):
    @classmethod
    def link_bound(cls, r: Round) -> float | None:
        """sync: 2·max(P, N·P/k)/B; async: max(P, N·P/k)/B (P = S per worker, k = ps.servers)."""
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
        the next pushes (fitted on the calibration run, fit_overlap)."""
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
