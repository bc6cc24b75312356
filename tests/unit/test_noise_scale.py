"""The gradient noise scale estimator (metrics/summary/noise_scale.py) on synthetic gradients of known noise scale."""
import numpy as np
import pytest

from metrics.summary.noise_scale import noise_scale_section


def synthetic_steps(workers: int, batch: int, steps: int, true_grad_sq: float, per_sample_var: float, dim: int,
                    seed: int = 0) -> dict[int, list[dict]]:
    """Step logs of `workers` workers whose per-sample gradients are G + noise, noise ~ N(0, per_sample_var I):
    the noise scale is tr(covariance) / |G|^2 = dim x per_sample_var / true_grad_sq."""
    rng = np.random.default_rng(seed)
    true_grad = np.full(dim, np.sqrt(true_grad_sq / dim))
    logs = {rank: [] for rank in range(workers)}
    for step in range(1, steps + 1):
        own = [true_grad + rng.normal(0, np.sqrt(per_sample_var), (batch, dim)).mean(axis=0) for _ in range(workers)]
        used = np.mean(own, axis=0)
        for rank in range(workers):
            logs[rank].append({"step": step, "samples": step * batch, "grad_sq_local": float(own[rank] @ own[rank]),
                               "grad_sq_global": float(used @ used)})
    return logs


@pytest.mark.parametrize("workers,batch", [(2, 32), (4, 16)])
def test_estimator_recovers_a_known_noise_scale(workers, batch):
    dim, per_sample_var, true_grad_sq = 2000, 0.5, 10.0  # noise scale 100 samples
    section = noise_scale_section(synthetic_steps(workers, batch, 400, true_grad_sq, per_sample_var, dim))
    assert section["b_simple"] == pytest.approx(dim * per_sample_var / true_grad_sq, rel=0.05)
    assert section["grad_sq"] == pytest.approx(true_grad_sq, rel=0.05)
    assert (section["steps"], section["worker_batch"], section["global_batch"]) == (400, batch, workers * batch)


def test_steps_not_measured_by_every_worker_are_left_out():
    logs = synthetic_steps(2, 32, 20, 10.0, 0.5, 200)
    for s in logs[1][::2]:
        del s["grad_sq_local"], s["grad_sq_global"]  # rank 1 measured only even steps
    assert noise_scale_section(logs)["steps"] == 10
    assert noise_scale_section({0: logs[0]}) is None  # one worker: one batch size, no estimate
