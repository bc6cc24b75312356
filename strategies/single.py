"""single: the baseline. One process, no communication.

With peers=N and peer_cpus=c it is the equal-resource baseline of an N-peer run: one
process on the same N*c cores (threads = cores; where the machine has fewer, the N peers
would share them, and so does this process: it runs one thread per available core), a
batch of N*batch_size (the global batch of a synchronous N-peer step), max_steps steps,
so it trains the same samples.
"""
from strategies.base import WORKER, LaunchSpec, StepReport, Strategy
from strategies.gradient_norms import GradientNorms


class Single(Strategy):
    is_baseline = True
    identical_snapshots = True

    @classmethod
    def launch_spec(cls, cfg) -> LaunchSpec:
        batch = cfg.peers * cfg.batch_size
        return LaunchSpec(roles=[WORKER], threads=cfg.peers * cfg.peer_cpus, batch_size=batch, effective_batch=batch)

    def setup(self, model, optimizer):
        self.norms = GradientNorms(self.cfg.noise_scale_every)
        return super().setup(model, optimizer)

    def step(self, samples: int) -> StepReport:
        """The update on the whole batch's gradient (its squared norm logged every noise_scale_every steps: the
        gradient a synchronous N-peer step averages to)."""
        if self.norms.measuring:
            for p in self.trainable():
                if p.grad is not None:
                    self.norms.add_alone(p.grad)
        return StepReport(opt_s=self.timed_optimizer_step(), extra=self.norms.take())
