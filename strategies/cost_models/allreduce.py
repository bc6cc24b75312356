"""allreduce's cost model: a ring all-reduce per step, behind backward with DDP (strategies/allreduce.py)."""
from metrics.projection.cost import Cost, RingAllReduceCost, exposed_s, ring_allreduce_s


class AllReduceCost(RingAllReduceCost):
    @classmethod
    def step_time(cls, m: Cost) -> float:
        """compute + comm, comm = 2(D-1)·(α' + S/(D·β')) + 2(M-1)·(α + S/(M·β)) on M = N/D nodes of D devices (D = 1:
        2(N-1)·(α + S/(N·β))); with DDP only max(0, comm - H) is exposed, H = the communication per step the
        calibration run measured behind backward."""
        comm = ring_allreduce_s(m)
        ddp = m.knobs.get("transport", "gloo") == "gloo" and m.knobs.get("ddp", True)
        return m.compute + (exposed_s(m, comm) if ddp else comm)

    @classmethod
    def warmup_steps(cls, knobs: dict) -> int:
        """With PowerSGD, up to its first compressed step: torch's hook all-reduces plain gradients for the first
        powersgd_start_iter steps, which the steady state never sends again."""
        return int(knobs["powersgd_start_iter"]) + 1 if knobs.get("comm_hook") == "powersgd" else 1
