"""allreduce: sum every gradient across peers each step and divide by N (what DDP does).

Plain-gloo (or MPI) reference beside Horovod's ring. All gradients travel as one
flat buffer. Bytes are the ring algorithm's payload, 2(N-1)/N x S per worker and
direction, S = gradient bytes. BatchNorm buffers stay local to each peer.
"""
import time

import torch

from strategies.base import StepReport
from strategies.transport import TransportStrategy, flatten, payload_bytes, unflatten_into


def ring_allreduce_bytes(size: int, peers: int) -> int:
    """Bytes one worker sends (and receives) in a ring all-reduce of `size` bytes."""
    return round(2 * (peers - 1) / peers * size)


def broadcast_initial_state(transport, model: torch.nn.Module, src: int = 0) -> None:
    """Every peer starts from rank src's parameters and buffers."""
    state = [t.data for t in [*model.parameters(), *model.buffers()] if t.is_floating_point()]
    flat = flatten(state)
    transport.broadcast(flat, src)
    unflatten_into(flat, state)


class AllReduce(TransportStrategy):
    name = "allreduce"

    def setup(self, model, optimizer) -> None:
        super().setup(model, optimizer)
        self.connect()
        broadcast_initial_state(self.transport, model)
        self.params = [p for p in model.parameters() if p.requires_grad]

    def step(self, samples: int) -> StepReport:
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        grads = [p.grad for p in self.params]
        start = time.perf_counter()
        flat = flatten(grads)
        self.transport.allreduce_sum(flat)
        flat /= self.ctx.world_size
        unflatten_into(flat, grads)
        comm_s = time.perf_counter() - start
        wire = ring_allreduce_bytes(payload_bytes(flat), self.ctx.world_size)
        return StepReport(comm_s=comm_s, opt_s=self.timed_optimizer_step(), bytes_sent=wire, bytes_recv=wire)
