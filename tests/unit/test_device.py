"""device=auto|cpu|cuda: resolved before launch, one GPU per peer where there are enough.

The unit tier checks resolution and errors on this machine; the GPU tests run where torch
sees a CUDA GPU and skip elsewhere (with the reason).
"""

import pytest
import torch

from helpers import HAS_GPU, compose_config, needs_gpu, needs_no_gpu
from job.device import PeerDevice, resolve_device
from job.errors import ConfigError
from launchers.config import validate

pytestmark = pytest.mark.timeout(60)


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
