"""Where a peer trains (`device=auto|cpu|cuda`, resolved before launch): each peer takes GPU local_rank mod the GPU
count, shared (and recorded: gpu_shared) where there are fewer GPUs than peers; synchronize() for timings."""
from dataclasses import dataclass

import torch

from job.errors import ConfigError

DEVICES = ("auto", "cpu", "cuda")
GLOO_WITH_NCCL = "cpu:gloo,cuda:nccl"  # host tensors over gloo, CUDA tensors over NCCL


def resolve_device(requested: str) -> str:
    """"cpu" or "cuda" for the device knob; before any process starts."""
    if requested not in DEVICES:
        raise ConfigError(f"device must be one of {', '.join(DEVICES)}, got {requested}")
    has_gpu = torch.cuda.is_available()
    if requested == "cuda" and not has_gpu:
        build = f"torch {torch.__version__}" + (" (a CPU build)" if torch.version.cuda is None else "")
        raise ConfigError(f"device=cuda, but {build} sees no CUDA GPU; use device=cpu (or auto), or install "
                          "torch's CUDA build of the pinned version on a machine with a GPU")
    if requested == "auto":
        return "cuda" if has_gpu else "cpu"
    return requested


@dataclass
class PeerDevice:
    device: torch.device
    gpu_shared: bool = False  # more peers on this host than GPUs

    @classmethod
    def for_peer(cls, requested: str, local_rank: int, local_peers: int) -> "PeerDevice":
        if resolve_device(requested) != "cuda":
            return cls(torch.device("cpu"))
        count = torch.cuda.device_count()
        device = torch.device("cuda", local_rank % count)
        torch.cuda.set_device(device)
        return cls(device, gpu_shared=local_peers > count)

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def collective_backend(self) -> str:
        """NCCL for CUDA tensors where the peer has a GPU of its own (NCCL refuses two ranks on one), else gloo."""
        return GLOO_WITH_NCCL if self.is_cuda and not self.gpu_shared else "gloo"

    def synchronize(self) -> None:
        if self.is_cuda:
            torch.cuda.synchronize(self.device)

    def describe(self) -> dict[str, str | bool]:
        if not self.is_cuda:
            return {"device": "cpu"}
        return {"device": str(self.device), "gpu_name": torch.cuda.get_device_name(self.device),
                "gpu_shared": self.gpu_shared}
