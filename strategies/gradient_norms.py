"""The gradient noise scale's inputs (metrics/summary/noise_scale.py): the squared norms (float64) of this worker's
own gradient and of the gradient its update used."""
import threading

import torch


def squared_norm(tensor: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(tensor.detach(), dtype=torch.float64) ** 2)


class GradientNorms:
    """Sums a step's squared norms (thread-safe: DDP's callbacks) every `every`-th step (0: never); take() ends it."""

    def __init__(self, every: int) -> None:
        self.every, self.step = int(every), 1
        self._lock, self.local, self.used = threading.Lock(), 0.0, 0.0

    @property
    def measuring(self) -> bool:
        return self.every > 0 and self.step % self.every == 0

    def add(self, tensor: torch.Tensor, local: bool, used: bool) -> None:
        """local: this worker's own gradient (or a bucket of it), before averaging; used: the averaged gradient the
        update uses; both: one process training alone, its own gradient the one it uses."""
        if not self.measuring:
            return
        value = squared_norm(tensor)
        with self._lock:
            self.local += value if local else 0.0
            self.used += value if used else 0.0

    def take(self) -> dict[str, float]:
        """The step's {grad_sq_local, grad_sq_global} (nothing on a step not measured); the next step begins."""
        with self._lock:
            found = {"grad_sq_local": self.local, "grad_sq_global": self.used} if self.measuring else {}
            self.local = self.used = 0.0
            self.step += 1
        return found
