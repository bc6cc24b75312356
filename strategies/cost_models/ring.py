"""ring's cost model: Horovod's ring all-reduce behind backward (strategies/ring.py)."""
from metrics.projection.cost import Cost, RingAllReduceCost, exposed_s, ring_allreduce_s


class RingCost(RingAllReduceCost):
    @classmethod
    def step_time(cls, m: Cost) -> float:
        """compute + max(0, 2(N-1)·(α + S/(N·β)) - H) / k, H = the communication per step the calibration run
        measured behind backward, k = ring.backward_passes_per_step.

        Horovod all-reduces each gradient (fused) over a ring as soon as backward produces it: N-1
        reduce-scatter and N-1 all-gather steps, in each one message of S/N bytes per worker
        (α + S/(N·β)). The part that ran while backward still did is measured in the calibration
        run, per step (H: its hidden_comm_s, else link_s - comm_s: from the first gradient handed
        to Horovod to the end of the all-reduce, less what was exposed after backward); the same
        backward hides as much at any N, so only what exceeds H is exposed. With k backward passes
        per step only every k-th step all-reduces. Horovod's cycle time and fusion buffer are not
        modelled.
        """
        passes = int(m.knobs.get("backward_passes_per_step", 1))
        return m.compute + exposed_s(m, ring_allreduce_s(m)) / passes
