"""ring's cost model: Horovod's ring all-reduce behind backward (strategies/ring.py)."""
from metrics.projection.cost import Cost, RingAllReduceCost, exposed_s, ring_allreduce_s


class RingCost(RingAllReduceCost):
    @classmethod
    def step_time(cls, m: Cost) -> float:
        """compute + max(0, comm - H) / k, comm = 2(D-1)·(α' + S/(D·β')) + 2(M-1)·(α + S/(M·β)) on M = N/D nodes of D
        devices (D = 1: 2(N-1)·(α + S/(N·β))), H = the communication per step the calibration run measured behind
        backward, k = ring.backward_passes_per_step."""
        passes = int(m.knobs.get("backward_passes_per_step", 1))
        return m.compute + exposed_s(m, ring_allreduce_s(m)) / passes
