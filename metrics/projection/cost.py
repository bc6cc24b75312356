"""What a strategy's cost model (Strategy.step_time) receives, and the pieces several models share.

An interface module: strategies import it, and metrics/projection/project.py (which imports strategy
classes back at run time) builds its values from a measured run.
"""
from dataclasses import dataclass, field


@dataclass
class Cost:
    """What a strategy's cost model (Strategy.step_time) receives: one step of N workers over links of rate beta,
    with what the calibration run measured (compute, hidden communication, server updates)."""

    workers: int              # N
    size: float               # S: bytes averaged per round (one worker's gradients or parameters)
    rate: float               # beta: link rate, bytes/s per direction (full duplex)
    latency: float = 0.0      # alpha: one-way latency per message, s
    compute: float = 0.0      # s per step outside communication: data + forward/backward + optimizer
    batch: int = 1            # samples per worker and step
    knobs: dict = field(default_factory=dict)  # the strategy's knobs (Strategy.knobs)
    hidden: float = 0.0       # s of communication per step the calibration run ran behind compute (measured)
    server: float = 0.0       # s a server spends on one update (measured on the servers; ps)
    overlap: float = 0.0      # share of a strategy's overlappable transfers the calibration run overlapped (fitted)


def ring_allreduce_s(m: Cost) -> float:
    """2(N-1)·(alpha + S/(N·beta)): N-1 reduce-scatter and N-1 all-gather steps, each one message of S/N bytes."""
    return 2 * (m.workers - 1) * (m.latency + m.size / (m.workers * m.rate))


def exposed_s(m: Cost, comm_s: float) -> float:
    """The part of comm_s not hidden behind compute: max(0, comm - hidden), hidden = the communication per step the
    calibration run measured running behind backward (the same compute hides as much at any N)."""
    return max(0.0, comm_s - m.hidden)
