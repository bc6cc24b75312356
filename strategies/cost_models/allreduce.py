"""allreduce's cost model: a ring all-reduce per step, behind backward with DDP (strategies/allreduce.py)."""
from metrics.projection.cost import Cost, RingAllReduceCost, exposed_s, ring_allreduce_s


class AllReduceCost(RingAllReduceCost):
    @classmethod
    def step_time(cls, m: Cost) -> float:
        """compute + comm, comm = 2(N-1)·(α + S/(N·β)); with DDP only max(0, comm - H) is exposed, H = the
        communication per step the calibration run measured behind backward.

        A ring all-reduce is N-1 reduce-scatter and N-1 all-gather steps; in each, a worker sends
        and receives one message of S/N bytes (α + S/(N·β)). DDP (transport=gloo, allreduce.ddp)
        all-reduces buckets while backward runs; how much of that ran behind backward is measured in
        the calibration run (H: hidden_comm_s, else link_s - comm_s: first bucket to last bucket
        done, less what was exposed after backward); the same backward hides as much at any N.
        Gradients that fit in one bucket start only after backward and hide nothing (H = 0 then).
        The flat all-reduce (allreduce.ddp=false, transport=mpi) starts after backward: all of it
        is exposed.
        """
        comm = ring_allreduce_s(m)
        ddp = m.knobs.get("transport", "gloo") == "gloo" and m.knobs.get("ddp", True)
        return m.compute + (exposed_s(m, comm) if ddp else comm)

    @classmethod
    def warmup_steps(cls, knobs: dict) -> int:
        """With PowerSGD, up to its first compressed step: torch's hook all-reduces plain gradients for the first
        powersgd_start_iter steps, which the steady state never sends again."""
        return int(knobs["powersgd_start_iter"]) + 1 if knobs.get("comm_hook") == "powersgd" else 1
