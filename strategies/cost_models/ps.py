"""ps's cost model: the servers' in-cast, update and replies (strategies/ps.py)."""
from dataclasses import replace

from metrics.summary.bounds import Round
from metrics.projection.cost import Cost, CostModel, intra_node_s


def shape(m: Cost) -> tuple[int, int, float]:
    """k servers; R, the pushes of other nodes a server takes per round (M, or M-1 co-located: its own node's shard
    stays local); L, the share of a node's summed gradient that crosses its link (1, or (k-1)/k co-located)."""
    servers = int(m.knobs.get("servers", 1))
    if m.colocated_servers:
        return servers, m.nodes - 1, (servers - 1) / servers
    return servers, m.nodes, 1.0


class ParameterServerCost(CostModel):
    models_nodes = True  # a node's devices reduce inside it and push one sum (docs/projection.md)

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
        """sync: compute + u + I + max(2L·S/β, (2R - φ(R-1))·S/(kβ)) + (2R+1)·α; async: compute + I + 2α + max(2L·S/β
        + u, R·(S/(kβ) + u)). k = ps.servers, u = a server's update (measured), φ = the share of replies that
        overlapped the next pushes (fitted on the calibration run, fit_overlap); M = N/D nodes of D devices, I =
        2(D-1)·(α' + S/(D·β')) the reduction inside a node; dedicated servers R = M, L = 1; co-located R = M-1, L =
        (k-1)/k. Flat (D = 1), dedicated: compute + u + max(2S/β, (2N - φ(N-1))·S/(kβ)) + (2N+1)·α."""
        servers, remote, crossing = shape(m)
        shard_s = m.size / (servers * m.rate)
        node_s = 2 * crossing * m.size / m.rate
        inside = intra_node_s(m)
        if m.knobs.get("mode", "sync") == "sync":
            return (m.compute + m.server + inside
                    + max(node_s, (2 * remote - m.overlap * max(0, remote - 1)) * shard_s)
                    + (2 * remote + 1) * m.latency)
        return m.compute + inside + 2 * m.latency + max(node_s + m.server, remote * (shard_s + m.server))

    @classmethod
    def fit_overlap(cls, m: Cost, step_s: float) -> float:
        """φ that makes the sync model meet the calibration run's own mean step (0 <= φ <= 1; async, and a server
        with one remote push: 0)."""
        servers, remote, _ = shape(m)
        if m.knobs.get("mode", "sync") != "sync" or remote < 2:
            return 0.0
        unhidden = cls.step_time(replace(m, overlap=0.0))
        share = (unhidden - step_s) / ((remote - 1) * m.size / (servers * m.rate))
        return min(1.0, max(0.0, share))
