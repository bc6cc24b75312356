"""The launch side's contract with a peer process: who a peer is (how it starts: LaunchSpec, metrics/recording)."""
import os
from dataclasses import dataclass
from pathlib import Path

from metrics.recording.rundir import PeerDir, RunDir


@dataclass
class PeerContext:
    """Who this process is, from the torchrun environment contract (or the launcher's own)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int  # processes of this run on this host
    master_addr: str
    master_port: int
    run: RunDir

    @classmethod
    def from_env(cls, run_dir: Path) -> "PeerContext":
        """torchrun's variables, else those of the launcher that started us (Open MPI, Horovod, PMI)."""

        def first(names: tuple[str, ...], default: str) -> str:
            return next((os.environ[n] for n in names if n in os.environ), default)

        world_size = first(("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "HOROVOD_SIZE", "PMI_SIZE"), "1")
        return cls(
            rank=int(first(("RANK", "OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "PMI_RANK"), "0")),
            world_size=int(world_size),
            local_rank=int(first(("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "HOROVOD_LOCAL_RANK"), "0")),
            local_world_size=int(first(("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "HOROVOD_LOCAL_SIZE"),
                                       world_size)),
            master_addr=first(("MASTER_ADDR",), "127.0.0.1"), master_port=int(first(("MASTER_PORT",), "0")),
            run=RunDir(run_dir))

    @property
    def peer(self) -> PeerDir:
        return self.run.peer(self.rank)
