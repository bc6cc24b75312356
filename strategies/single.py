"""Single-process baseline: the local optimizer step, nothing to communicate."""
from strategies.base import StepReport, Strategy
from job.errors import ConfigError


class Single(Strategy):
    name = "single"

    @classmethod
    def validate(cls, cfg) -> None:
        if cfg.peers != 1:
            raise ConfigError(f"strategy=single runs one peer, got peers={cfg.peers}")

    def step(self, samples: int) -> StepReport:
        return StepReport(opt_s=self.timed_optimizer_step())
