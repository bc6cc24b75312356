"""single: the baseline, one process without communication. With peers=N it is the equal-resource baseline of an
N-peer run: one process on the N x peer_cpus cores with a batch of N x batch_size, max_steps steps."""
import torch
from omegaconf import DictConfig
from torch import nn

from strategies.base import WORKER, LaunchSpec, StepReport, Strategy
from strategies.gradient_norms import GradientNorms


class Single(Strategy):
    is_baseline = True
    identical_snapshots = True

    @classmethod
    def launch_spec(cls, cfg: DictConfig) -> LaunchSpec:
        batch = cfg.peers * cfg.batch_size
        return LaunchSpec(roles=[WORKER], threads=cfg.peers * cfg.peer_cpus, batch_size=batch, effective_batch=batch)

    def setup(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> nn.Module:
        self.norms = GradientNorms(self.cfg.noise_scale_every)
        return super().setup(model, optimizer)

    def step(self, samples: int) -> StepReport:
        """The update on the whole batch's gradient (its squared norm logged every noise_scale_every steps)."""
        if self.norms.measuring:
            for p in self.trainable():
                if p.grad is not None:
                    self.norms.add(p.grad, local=True, used=True)
        return StepReport(opt_s=self.timed_optimizer_step(), extra=self.norms.take())
