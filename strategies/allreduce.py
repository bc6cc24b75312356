"""allreduce: the gradient all-reduce of data-parallel training, every step.

transport=gloo: torch's DistributedDataParallel itself. Gradients are all-reduced in
buckets of allreduce.bucket_cap_mb while backward is still running (DDP's reducer fires a
bucket as soon as its gradients are ready), so communication overlaps backward. A DDP
communication hook counts each bucket's payload and then runs DDP's default hook
(divide by N, all-reduce over gloo). BatchNorm buffers stay local (broadcast_buffers off),
as in every strategy here. Rank 0's parameters reach every peer when DDP is built. On GPUs
the buckets go over NCCL when each peer of a host has its own GPU, else over gloo.

transport=mpi, or allreduce.ddp=false: one flat all-reduce of all gradients after
backward (no overlap) over the transport; MPI runs Open MPI's ring algorithm
(strategies/transport.py). allreduce.ddp=false over gloo is the hand-written reference
that DDP is benchmarked against (bench/ddp_overlap.py).

Bytes are the ring algorithm's payload, 2(N-1)/N x S per worker and direction, S = the
gradient bytes (gloo's all-reduce of large buffers is a ring). Deadlines: gloo's process
group timeout (timeouts.collective_s) bounds every DDP collective; MPI calls poll against it.
"""
import time

from metrics.project import Cost, exposed_s, ring_allreduce_s
from strategies.base import StepReport
from strategies.transport import (TransportStrategy, broadcast_initial_state, flatten, payload_bytes,
                                  RingAllReduceRounds, ring_allreduce_bytes, unflatten_into)


class AllReduce(RingAllReduceRounds, TransportStrategy):
    @classmethod
    def step_time(cls, m: Cost) -> float:
        """compute + comm, comm = 2(N-1)·(α + S/(N·β)); with DDP only max(0, comm - overlap·compute) is exposed.

        A ring all-reduce is N-1 reduce-scatter and N-1 all-gather steps; in each, a worker sends
        and receives one message of S/N bytes (α + S/(N·β)). DDP (transport=gloo, allreduce.ddp)
        all-reduces buckets while backward runs; the model lets communication hide behind the
        overlappable share of compute (m.overlap, backward's share) and knows nothing of buckets
        (gradients that fit in one bucket start only after backward and hide nothing). The flat
        all-reduce (allreduce.ddp=false, transport=mpi) starts after backward: all of it is exposed.
        """
        comm = ring_allreduce_s(m)
        ddp = m.knobs.get("transport", "gloo") == "gloo" and m.knobs.get("ddp", True)
        return m.compute + (exposed_s(m, comm) if ddp else comm)

    @property
    def uses_ddp(self) -> bool:
        return self.cfg.transport == "gloo" and bool(self.cfg.allreduce.ddp)

    def setup(self, model, optimizer):
        super().setup(model, optimizer)
        self.connect()
        self.round_bytes = 0
        self.first_bucket_at = self.last_bucket_done_at = None
        if not self.uses_ddp:
            broadcast_initial_state(self.transport, model)
            return model
        from torch.nn.parallel import DistributedDataParallel

        self.ddp = DistributedDataParallel(model, device_ids=[self.device.device] if self.device.is_cuda else None,
                                           bucket_cap_mb=float(self.knobs(self.cfg)["bucket_cap_mb"]),
                                           broadcast_buffers=False)
        self.ddp.register_comm_hook(state=self.hook_state(), hook=self._counted_allreduce)
        return self.ddp

    def hook_state(self):
        """The state DDP hands to bucket_hook."""
        return None

    def bucket_hook(self, state, bucket):
        """What DDP does with a bucket of gradients: its default all-reduce (divide by N, sum)."""
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        return allreduce_hook(state, bucket)

    def bucket_communicates(self, state) -> bool:
        """Whether bucket_hook sends this bucket (its payload and timing are then recorded)."""
        return True

    def _counted_allreduce(self, state, bucket):
        """bucket_hook on one bucket, with its payload and timing recorded when it communicates."""
        if not self.bucket_communicates(state):
            return self.bucket_hook(state, bucket)
        if self.first_bucket_at is None:
            self.first_bucket_at = time.perf_counter()
        self.round_bytes += payload_bytes(bucket.buffer())

        def done(future):
            self.last_bucket_done_at = time.perf_counter()
            try:
                return future.value()
            except RuntimeError as exc:
                if "timed out" in str(exc).lower():
                    raise TimeoutError(f"DDP all-reduce on rank {self.ctx.rank} timed out after "
                                       f"{float(self.cfg.timeouts.collective_s):.0f} s (timeouts.collective_s): "
                                       "a peer stalled or died") from exc
                raise

        return self.bucket_hook(state, bucket).then(done)

    def step(self, samples: int) -> StepReport:
        if not self.uses_ddp:
            return self._flat_allreduce_step()
        return self._ddp_step()

    def _ddp_step(self) -> StepReport:
        """The update after DDP all-reduced this step's gradients during backward."""
        link_s = self.last_bucket_done_at - self.first_bucket_at
        sent = ring_allreduce_bytes(self.round_bytes, self.ctx.world_size)
        self.round_bytes, self.first_bucket_at = 0, None
        return StepReport(opt_s=self.timed_optimizer_step(), bytes_sent=sent, bytes_recv=sent,
                          link_s=link_s)

    def _flat_allreduce_step(self) -> StepReport:
        self.fill_missing_grads()
        grads = [p.grad for p in self.trainable()]
        flat = flatten(grads)
        self.transport.allreduce_sum(flat)
        flat /= self.ctx.world_size
        unflatten_into(flat, grads)
        sent = ring_allreduce_bytes(payload_bytes(flat), self.ctx.world_size)
        return StepReport(opt_s=self.timed_optimizer_step(), bytes_sent=sent, bytes_recv=sent)
