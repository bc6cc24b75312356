"""device=auto|cpu|cuda: resolved before launch, one GPU per peer where there are enough.

The unit tier checks resolution and errors on this machine; the GPU tests run where torch
sees a CUDA GPU and skip elsewhere (with the reason).
"""

import json

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


@pytest.mark.parametrize("device, gpu_shared, backend", [
    (torch.device("cpu"), False, "gloo"),
    (torch.device("cuda", 1), False, "cpu:gloo,cuda:nccl"),  # a GPU of its own: CUDA tensors over NCCL
    (torch.device("cuda", 0), True, "gloo"),                 # NCCL refuses two ranks on one GPU
])
def test_the_process_group_uses_nccl_only_where_each_peer_has_a_gpu_of_its_own(device, gpu_shared, backend):
    assert PeerDevice(device, gpu_shared).collective_backend == backend


@pytest.mark.parametrize("device, gpus, backend", [
    ("cpu", 0, "gloo"), ("cuda", 1, "gloo"), ("cuda", 2, "cpu:gloo,cuda:nccl"), ("cuda", 8, "cpu:gloo,cuda:nccl")])
def test_the_device_check_runs_single_and_two_peer_allreduce_on_the_device(device, gpus, backend):
    from bench.device_check import plan

    single, allreduce = plan(device, gpus, "resnet18", 50, 64)
    assert single["backend"] is None and allreduce["backend"] == backend
    for run, strategy, peers in ((single, "single", 1), (allreduce, "allreduce", 2)):
        assert {f"strategy={strategy}", f"peers={peers}", f"device={device}", "model=resnet18", "max_steps=50",
                "batch_size=64", "network=loopback"} <= set(run["overrides"])
        validate(compose_config(*run["overrides"], "device=cpu"))  # a job train.py accepts (on this machine's device)


@pytest.mark.parametrize("args, error", [
    (["--model", "custom"], "--model custom: not a built-in conf/model option"),
    (["--steps", "1"], "--steps must be >= 2"),
    (["--budget-s", "0"], "--budget-s > 0"),
    pytest.param(["--device", "cuda"], "device=cuda, but torch", marks=needs_no_gpu),
])
def test_the_device_check_refuses_bad_input_before_any_run(tmp_path, capsys, args, error):
    from bench.device_check import main

    assert main([str(tmp_path / "out"), *args]) == 2
    assert error in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_recorded_device_check_names_the_machine_it_ran_on_and_its_failed_runs(tmp_path):
    from bench.device_check import record
    from bench.results import load

    elsewhere = {"cpu_vendor": "GenuineIntel", "cpu_model_name": "Intel(R) Xeon(R) Processor", "cpu_family": "6",
                 "cpu_model": "143", "cpu_mhz": 2100, "cores": 16, "memory_gib": 125.8, "kernel": "6.18",
                 "gpu": "NVIDIA H200", "load_average": 0.5}
    run = {"name": "single", "repeat": 0, "samples_per_s": 100.0, "step_s_steady": 0.1}
    result = {"device": "cuda", "gpus": ["NVIDIA H200"], "torch": "2.11.0", "cuda": "13.0", "model": "resnet18",
              "steps": 200, "batch_size_per_peer": 128, "repeats": 1, "methods": {}, "measured_at": "2026-11-29 21:57:00",
              "machine": elsewhere, "spread": {},
              "runs": [run, {"name": "allreduce", "repeat": 0, "error": "RuntimeError: train.py failed"}]}
    (tmp_path / "device_check.json").write_text(json.dumps(result))
    record(tmp_path / "device_check.json", tmp_path / "results")
    entry = load("device_check", tmp_path / "results")
    assert entry.machine == elsewhere and entry.measured_at == "2026-11-29 21:57:00"
    assert entry.goal_met is False and entry.body["failed"] == ["allreduce-0"]
