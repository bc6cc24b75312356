"""A user's strategy, outside the project's code: this module (the strategy and its cost model) and
strategy/toy.yaml beside it. The tests put this folder on PYTHONPATH and on Hydra's search path
(hydra.searchpath=[file://tests/userstrategies] strategy=toy), or name this module in an entry point."""
from metrics.projection.cost import Cost, RingAllReduceCost
from strategies.base import StepReport
from strategies.transport import (TransportStrategy, broadcast_initial_state, flatten, payload_bytes,
                                  ring_allreduce_bytes, unflatten_into)


class ToyCost(RingAllReduceCost):
    @classmethod
    def step_time(cls, m: Cost) -> float:
        """compute + 2(N-1)·(α + S/(N·β)) / every: a ring all-reduce of the gradients every `every` steps.

        The all-reduce starts after backward, so all of it is exposed.
        """
        return m.compute + 2 * (m.workers - 1) * (m.latency + m.size / (m.workers * m.rate)) / cls.steps_per_round(
            m.knobs)

    @classmethod
    def steps_per_round(cls, knobs: dict) -> int:
        return int(knobs["every"])


class Toy(TransportStrategy):
    """Sums the workers' gradients every `toy.every` steps, averaged; the steps between update on local ones."""

    identical_snapshots = False
    benchmark_overrides = {"*": ("toy.every=2",)}

    @classmethod
    def averaging_period(cls, cfg) -> tuple[int, int]:
        return 0, int(cfg.toy.every)

    def setup(self, model, optimizer):
        super().setup(model, optimizer)
        broadcast_initial_state(self.connect(), model)
        self.steps = 0
        return model

    def step(self, samples: int) -> StepReport:
        self.steps += 1
        if self.steps % int(self.cfg.toy.every):
            return StepReport(opt_s=self.timed_optimizer_step())
        self.fill_missing_grads()
        grads = [p.grad for p in self.trainable()]
        flat = flatten(grads)
        self.transport.allreduce_sum(flat)
        unflatten_into(flat / self.ctx.world_size, grads)
        sent = ring_allreduce_bytes(payload_bytes(flat), self.ctx.world_size)
        return StepReport(opt_s=self.timed_optimizer_step(), bytes_sent=sent, bytes_recv=sent)
