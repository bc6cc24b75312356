"""device=auto|cpu|cuda: resolved before launch, one GPU per peer where there are enough.

The unit tier checks resolution and errors on this machine; the GPU tests run where torch
sees a CUDA GPU and skip elsewhere (with the reason).
"""
import json

import pytest
import torch

from helpers import QUICK, compose_config, quick_run, run_train, strategy_names
from job.device import PeerDevice, resolve_device
from job.errors import ConfigError
from launchers.config import validate

pytestmark = pytest.mark.timeout(60)
HAS_GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU (torch sees none here)")
needs_no_gpu = pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")


def test_auto_is_the_gpu_when_torch_sees_one():
    assert resolve_device("auto") == ("cuda" if HAS_GPU else "cpu")
    assert resolve_device("cpu") == "cpu"
    assert PeerDevice.for_peer("cpu", local_rank=3, local_peers=4).device == torch.device("cpu")


@needs_no_gpu
def test_cuda_without_a_gpu_says_why_and_what_to_do():
    with pytest.raises(ConfigError) as caught:
        validate(compose_config("strategy=allreduce", "peers=2", "device=cuda"))
    message = str(caught.value)
    assert "device=cuda" in message and "sees no CUDA GPU" in message and "device=cpu" in message


@needs_gpu
def test_peers_take_gpus_round_robin_and_know_when_they_share():
    count = torch.cuda.device_count()
    devices = [PeerDevice.for_peer("cuda", rank, count + 1) for rank in range(count + 1)]
    assert [d.device.index for d in devices] == [*range(count), 0]
    assert all(d.gpu_shared for d in devices)
    assert not PeerDevice.for_peer("cuda", 0, count).gpu_shared


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
    if result.returncode == 2 and "built without GPU support" in result.stderr:  # refused before launch (ring)
        pytest.skip(result.stderr.strip().splitlines()[-1])
    assert result.returncode == 0, result.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["config"]["device"] == "cuda" and summary["device"]["gpus"]
    assert summary["device"]["gpu_shared"] == (torch.cuda.device_count() < 2)
    breakdown = summary["time_breakdown_s"]
    assert breakdown["compute_s"] > 0 and all(v >= 0 for v in breakdown.values())
