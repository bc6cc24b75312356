"""The run directory: every path and file name of a run, defined once for writers and readers (docs/runs.md, Files)."""
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

PEER_PREFIX = "peer"
SWEEP_PLAN = ".avgbench/sweep.json"  # in a multirun's directory: its jobs, block by block (launchers/sweeper.py)
SUPERSEDED = "superseded"  # a resumed sweep moves unfinished job directories below SWEEP_DIR/superseded/


class PeerDir:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.rank = int(self.path.name.removeprefix(PEER_PREFIX))

    steps = property(lambda self: self.path / "steps.jsonl")
    evals = property(lambda self: self.path / "eval.jsonl")
    resources = property(lambda self: self.path / "resources.jsonl")
    result = property(lambda self: self.path / "result.json")
    output_log = property(lambda self: self.path / "output.log")
    error = property(lambda self: self.path / "error.txt")
    fault = property(lambda self: self.path / "fault.json")
    rounds = property(lambda self: self.path / "rounds.jsonl")  # one record per averaging round (summary/rounds.py)
    snapshots = property(lambda self: self.path / "snapshots")  # weights saved for evaluation after training
    weights = property(lambda self: self.path / "weights")  # the snapshots, kept after evaluation (keep_weights)
    eval_samples = property(lambda self: self.path / "eval_samples.npz")  # each test sample's outcome per evaluation

    def file(self, name: str) -> Path:
        """A file a strategy keeps for this peer (e.g. its own per-epoch log)."""
        return self.path / name


class RunDir:
    def __init__(self, path: Path):
        self.path = Path(path)

    private = property(lambda self: self.path / ".avgbench")
    config = property(lambda self: self.private / "config.yaml")
    launch_spec = property(lambda self: self.private / "launch.json")
    run_id = property(lambda self: self.private / "run_id")
    network = property(lambda self: self.private / "network.json")
    hostfile = property(lambda self: self.private / "hostfile")
    machine = property(lambda self: self.private / "machine.jsonl")  # the launcher's machine samples
    cpu_groups = property(lambda self: self.private / "cpu.json")
    dilation = property(lambda self: self.private / "dilation.json")
    link = property(lambda self: self.private / "link.json")  # the link the run measures (netemu/auto.py)
    link_meter = property(lambda self: self.private / "link_meter.json")  # its counters (netemu/goodput.py)
    evaluation = property(lambda self: self.private / "evaluation")  # shared by a host's workers (job/evaluation.py)
    summary = property(lambda self: self.path / "summary.json")
    launcher_log = property(lambda self: self.path / "launcher.log")

    def file(self, name: str) -> Path:
        """A file a strategy shares between the run's processes (e.g. a rendezvous address)."""
        return self.private / name

    def peer(self, rank: int) -> PeerDir:
        return PeerDir(self.path / f"{PEER_PREFIX}{rank}")

    def peers(self) -> list[PeerDir]:
        """Every peer directory, by rank."""
        found = [PeerDir(p) for p in self.path.glob(f"{PEER_PREFIX}*") if p.name.removeprefix(PEER_PREFIX).isdigit()]
        return sorted(found, key=lambda d: d.rank)

    def errors(self) -> list[Path]:
        return [d.error for d in self.peers() if d.error.exists()]


WORKER, SERVER = "worker", "server"


@dataclass
class LaunchSpec:
    """How a run's processes start, decided before launch; saved as RUN/.avgbench/launch.json, read only through it."""

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


def run_dirs_under(top: Path) -> list[Path]:
    """Directories below `top` (itself included) that hold a finished run's summary."""
    return sorted(p.parent for p in Path(top).rglob("summary.json"))


NODE_FOLDER = re.compile(r"node(\d+)")


def node_rank_of(path: Path) -> int | None:
    """R for a folder node<R> of a run over several nodes (its parent holds no summary of its own), else None."""
    found = NODE_FOLDER.fullmatch(path.name)
    return int(found[1]) if found and not (path.parent / "summary.json").exists() else None


def run_path(path: Path) -> Path:
    """The run a folder with a summary (or one started without) belongs to: its own, or its node folders' parent."""
    return path.parent if node_rank_of(path) is not None else path


def run_folders(paths: list[Path]) -> dict[Path, list[Path]]:
    """Each run's path -> its folders holding summary.json (node folders in node-rank order)."""
    runs: dict[Path, list[Path]] = {}
    for path in paths:
        runs.setdefault(run_path(path), []).append(path)
    return {run: sorted(folders, key=lambda f: node_rank_of(f) or 0) for run, folders in runs.items()}


def summary_folders(path: Path) -> list[Path]:
    """The run's folders holding a summary.json: itself, or its node folders in node-rank order; none: an error."""
    path = Path(path)
    if (rank := node_rank_of(path)) is not None:
        raise ValueError(f"{path} is node {rank} of the run at {path.parent}: give the run's folder (a node's folder "
                         "holds only its own workers)")
    folders = run_folders(run_dirs_under(path)).get(path)
    if not folders:
        raise ValueError(f"{path}: no summary.json, in it or in node folders below it (not a finished run)")
    return folders


def started_runs_under(top: Path) -> list[Path]:
    """Directories below `top` where a run was started (its config was written)."""
    return sorted(p.parent.parent for p in Path(top).rglob(".avgbench/config.yaml"))
