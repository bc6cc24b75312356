"""The launch side's contract with a peer process: how a run's processes start (LaunchSpec) and who a peer is."""
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from metrics.recording.rundir import PeerDir, RunDir

WORKER, SERVER = "worker", "server"


@dataclass
class LaunchSpec:
    """How a run's processes start, decided before launch; saved as RUN/.avgbench/launch.json."""

    roles: list[str]  # per rank, WORKER or SERVER
    threads: int  # torch threads (and CPUs pinned) of each process
    batch_size: int  # samples per step of each worker
    effective_batch: int  # samples behind one optimizer update (the learning rate scales to it)
    launcher: str = "local"  # "local" (torchrun environment, one process per rank), "mpirun" or "horovodrun"
    launcher_args: list[str] = field(default_factory=list)  # the strategy's arguments for it (e.g. horovodrun --mpi)
    host_args: list[str] = field(default_factory=list)  # where ranks run unless the placement places them
    env: dict[str, str] = field(default_factory=dict)
    tolerate_peer_loss: bool = False

    @property
    def processes(self) -> int:
        return len(self.roles)

    @property
    def workers(self) -> int:
        return self.roles.count(WORKER)

    def save(self, run: RunDir) -> None:
        run.launch_spec.parent.mkdir(parents=True, exist_ok=True)
        run.launch_spec.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, run: RunDir) -> "LaunchSpec":
        return cls(**json.loads(run.launch_spec.read_text()))


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
