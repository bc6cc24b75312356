"""device=auto|cpu|cuda: resolved before launch, one GPU per peer where there are enough.

The unit tier checks resolution and errors on this machine; the GPU tests run where torch
sees a CUDA GPU and skip elsewhere (with the reason).
"""
import json

import pytest
import torch

from helpers import QUICK, needs_gpu, needs_no_gpu, quick_run, run_train, strategy_names

pytestmark = pytest.mark.timeout(60)


@needs_no_gpu
@pytest.mark.integration
def test_device_cuda_on_a_cpu_machine_fails_before_launch(run_dir):
    result = run_train(run_dir, *QUICK, "device=cuda", "max_steps=2")
    assert result.returncode == 2
    assert "avgbench: error: device=cuda" in result.stderr and not run_dir.joinpath("peer0").exists()


@needs_gpu
@pytest.mark.integration
@pytest.mark.timeout(300)
@pytest.mark.parametrize("strategy", strategy_names())
def test_every_strategy_trains_on_the_gpu(run_dir, strategy):
    result = run_train(run_dir, *QUICK, *quick_run(strategy), "peers=2", "device=cuda", "max_steps=8")
    refused = ("built without GPU support", "need a GPU of their own")  # ring: before launch, with the reason
    if result.returncode == 2 and any(reason in result.stderr for reason in refused):
        pytest.skip(result.stderr.strip().splitlines()[-1])
    assert result.returncode == 0, result.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["config"]["device"] == "cuda" and summary["device"]["gpus"]
    workers = sum(peer["result"]["role"] == "worker" for peer in summary["peers"])  # single: one process
    assert summary["device"]["gpu_shared"] == (workers > torch.cuda.device_count())
    breakdown = summary["time_breakdown_s"]
    assert breakdown["compute_s"] > 0 and all(v >= 0 for v in breakdown.values())
