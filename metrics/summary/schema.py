"""summary.json as frozen dataclasses, its keys kept in order (SummaryError: a file that is not a summary)."""
import json
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Self, TypeVar

from metrics.recording.rundir import RunDir

Json = dict[str, Any]
S = TypeVar("S", bound="Section")


class SummaryError(ValueError):
    pass


@dataclass(frozen=True, kw_only=True)
class Section:
    """A part of summary.json: the keys it names are fields; any other key it held is in `extra`."""
    extra: Json = field(default_factory=dict, repr=False, compare=False)
    keys: tuple | None = field(default=(), repr=False, compare=False)  # the JSON's keys in order; None: it was null

    def __bool__(self) -> bool:
        """False where the file held no such section (absent or null)."""
        return self.keys is not None

    @classmethod
    def from_dict(cls, data: Json) -> Self:
        hints = typing.get_type_hints(cls)
        named = {f.name for f in fields(cls)} - {"extra", "keys"}
        return cls(**{k: typed(hints[k], v) for k, v in data.items() if k in named},
                   extra={k: v for k, v in data.items() if k not in named}, keys=tuple(data))

    def to_dict(self) -> Json | None:
        if self.keys is None:
            return None
        named = [f.name for f in fields(self) if f.name not in ("extra", "keys")]
        order = self.keys or (*named, *self.extra)
        return {k: plain(getattr(self, k)) if k in named else self.extra[k] for k in order}


def typed(hint: Any, value: Any) -> Any:
    """value as the type `hint` names: a dict as its Section, a list of dicts as a list of its Section."""
    for kind in typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,):
        if isinstance(kind, type) and issubclass(kind, Section) and isinstance(value, dict | None):
            return kind.from_dict(value) if value is not None else kind(keys=None)
        if typing.get_origin(kind) is list and isinstance(value, list):
            item = typing.get_args(kind)[0]
            if isinstance(item, type) and issubclass(item, Section):
                return [item.from_dict(v) if isinstance(v, dict) else v for v in value]
    return value


def holds(data: Any, keys: list[str]) -> bool:
    return not keys or isinstance(data, dict) and keys[0] in data and holds(data[keys[0]], keys[1:])


def unrecorded(kind: type[S]) -> S:
    """A section field whose default is a section the file did not hold."""
    return field(default_factory=lambda: kind(keys=None))


def plain(value: Any) -> Any:
    if isinstance(value, Section):
        return value.to_dict()
    return [plain(v) for v in value] if isinstance(value, list) else value


@dataclass(frozen=True, kw_only=True)
class Device(Section):
    name: str = "cpu"
    gpus: list = field(default_factory=list)
    gpu_shared: bool = False


@dataclass(frozen=True, kw_only=True)
class Fault(Section):
    """The first injected fault (a peer's fault.json) and how the run took it."""
    time: float | None = None
    survived: bool | None = None
    run_ended_after_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class Node(Section):
    """One node of a run over several: where its summary is and how it ended."""
    node_rank: int | None = None
    host: str | None = None
    path: str | None = None
    status: str | None = None
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class Window(Section):
    first: int | None = None
    last: int | None = None
    complete: bool | None = None


@dataclass(frozen=True, kw_only=True)
class Accuracy(Section):
    mean: float | None = None
    worst: float | None = None
    best: float | None = None
    by_rank: dict = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Evaluation(Section):
    interval_steps: int | None = None
    interval_samples: int | None = None
    test_samples: int | None = None
    evaluations: int | None = None
    after_training_s: float | None = None
    snapshot_pause_s: float | None = None
    mode: str | None = None
    in_training_s: float | None = None
    confirm_after_steps: int | None = None
    stopped_at_target: bool | None = None


@dataclass(frozen=True, kw_only=True)
class Link(Section):
    kind: str | None = None
    asked: str | None = None
    scope: str | None = None
    hosts: int | None = None
    latency_ms: float | None = None
    mtu: int | None = None
    nominal_mbit: float | None = None
    goodput_mbit: float | None = None
    goodput_share: float | None = None
    busy_s: float | None = None
    busy_intervals: int | None = None
    worst_direction: str | None = None
    faithful: bool | None = None
    reason: str | None = None
    by_direction: list | None = None  # each metered direction (an emulated link's)


@dataclass(frozen=True, kw_only=True)
class Shape(Section):
    peers: int | None = None
    peer_cpus: int | None = None
    processes: int | None = None
    cores: int | None = None
    oversubscription: float | None = None
    fits: bool | None = None
    host: str | None = None
    node_rank: int | None = None
    nnodes: int | None = None
    hosts: list | None = None  # a run over several nodes: every node's host


@dataclass(frozen=True, kw_only=True)
class Machine(Section):
    cores: int | None = None
    fingerprint: dict | None = None
    cpu_pressure_share: float | None = None
    steal_share: float | None = None
    load_mean: float | None = None
    other_cpu_share: float | None = None
    alone: bool | None = None
    lock: dict | None = None
    samples: int | None = None


@dataclass(frozen=True, kw_only=True)
class Isolation(Section):
    status: str | None = None
    reason: str | None = None
    period_us: int | None = None
    dilation: float | None = None
    dilation_unchecked: bool | None = None
    distortion: float | None = None
    distortion_limit: float | None = None
    distortion_within_limit: bool | None = None
    faithful: bool | None = None
    unfaithful: list = field(default_factory=list)
    by_rank: list = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class SpeedReference(Section):
    median_s: float | None = None
    moved: float | None = None
    tolerance: float | None = None
    beyond_tolerance: bool = False
    cost_share: float | None = None
    work: dict | None = None
    by_rank: dict = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class IsolatedRound(Section):
    latency_s_per_round: float | None = None
    why: str | None = None


@dataclass(frozen=True, kw_only=True)
class Efficiency(Section):
    """Link efficiency (metrics/summary/bounds.py link_efficiency): the floor of the rounds / their link time."""
    why: str | None = None  # where there is no floor
    method: str | None = None
    bound_s_per_round: float | None = None
    measured_s_per_round: float | None = None
    efficiency: float | None = None
    isolated_round: IsolatedRound = unrecorded(IsolatedRound)


@dataclass(frozen=True, kw_only=True)
class Busiest(Section):
    rank: int | None = None
    busiest_over_mean: float | None = None


@dataclass(frozen=True, kw_only=True)
class Network(Section):
    """The network as built and its wire bytes (metrics/summary/network.py)."""
    mode: str | None = None
    per_peer: bool | None = None
    latency_ms: float | None = None
    wire_tx_over_payload: float | None = None
    busiest: Busiest = unrecorded(Busiest)
    efficiency: Efficiency = unrecorded(Efficiency)


@dataclass(frozen=True, kw_only=True)
class AveragingRounds(Section):
    """Rounds recorded one by one (metrics/summary/rounds.py); rounds: one record per round."""
    rounds: list = field(default_factory=list)
    group_sizes: dict = field(default_factory=dict)  # kind -> group size -> rounds
    failed: int = 0
    method: str | None = None


@dataclass(frozen=True, kw_only=True)
class NoiseScale(Section):
    """The gradient noise scale (metrics/summary/noise_scale.py)."""
    b_simple: float | None = None
    steps: int | None = None


@dataclass(frozen=True, kw_only=True)
class WallPhases(Section):
    """Where a job's wall time went, in real seconds (metrics/summary/wall.py); the phases sum to the job's span."""
    command_s: float = 0.0
    launch_s: float = 0.0
    imports_s: float = 0.0
    data_s: float = 0.0
    model_s: float = 0.0
    rendezvous_s: float = 0.0
    training_s: float = 0.0
    snapshot_s: float = 0.0
    precise_bn_s: float = 0.0
    test_s: float = 0.0
    evaluation_wait_s: float = 0.0
    speed_reference_s: float = 0.0
    exit_s: float = 0.0
    teardown_s: float = 0.0
    summary_s: float = 0.0
    other_s: float = 0.0

    def seconds(self) -> dict[str, float]:
        """phase -> seconds, in the job's order."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("extra", "keys")}


@dataclass(frozen=True, kw_only=True)
class PeerWindow(Section):
    """A worker's figures in the measurement window."""
    samples: int = 0
    train_s: float = 0.0
    steps: int = 0


@dataclass(frozen=True, kw_only=True)
class Peer(Section):
    """One peer's figures (metrics/summary/build.py peer_figures); result is its result.json."""
    rank: int = 0
    steps: int = 0
    samples: int = 0
    train_s: float | None = None
    window: PeerWindow = unrecorded(PeerWindow)
    startup_wait_s: float = 0.0
    result: dict | None = None
    error: str | None = None
    peak_rss_bytes: int | None = None  # from here on: only where its resources were sampled
    mean_cpu_percent: float | None = None
    disk_read_bytes: int | None = None
    net_tx_bytes: int | None = None
    lo_tx_bytes: int | None = None


@dataclass(frozen=True, kw_only=True)
class Summary(Section):
    """One run's summary.json (the figures' definitions: its `methods`)."""
    status: str | None = None
    exit_code: int | None = None
    error: str | None = None
    failed_rank: int | None = None
    lost_peers: list = field(default_factory=list)
    fault: Fault = unrecorded(Fault)
    config: Json = field(default_factory=dict)
    strategy_knobs: Json = field(default_factory=dict)
    is_baseline: bool = False
    failure_counters: list = field(default_factory=list)
    workers: int | None = None
    device: Device = unrecorded(Device)
    data_is_synthetic: bool = False
    network_scope: str | None = None
    started_at: float = 0.0
    wall_s: float = 0.0
    wall_phases_s: WallPhases = unrecorded(WallPhases)
    total_samples: int | None = None
    useful_samples: int | None = None
    startup_wait_s: float | None = None
    window: Window = unrecorded(Window)
    throughput_samples_per_s: float | None = None
    accuracy_by_worker: Accuracy = unrecorded(Accuracy)
    final_test_accuracy: float | None = None
    final_test_loss: float | None = None
    time_to_target_s: float | None = None
    samples_to_target: float | None = None
    samples_to_target_bootstrap: dict | None = None
    steps_to_target: float | None = None
    time_per_sample_s: float | None = None
    time_to_target_by_rank: dict = field(default_factory=dict)
    evaluated_states_identical: bool | None = None
    target: Json = field(default_factory=dict)
    evaluation: Evaluation = unrecorded(Evaluation)
    effective_lr: float | None = None
    time_breakdown_s: dict[str, float | None] = field(default_factory=dict)
    time_breakdown_share: dict[str, float] = field(default_factory=dict)
    hidden_comm_s: float | None = None
    hidden_comm_share: float | None = None
    bytes_sent_per_step: float | None = None
    bytes_recv_per_step: float | None = None
    bytes_sent_per_sample: float | None = None
    bytes_recv_per_sample: float | None = None
    averaging_rounds: AveragingRounds = unrecorded(AveragingRounds)
    noise_scale: NoiseScale = unrecorded(NoiseScale)
    network: Network = unrecorded(Network)
    link: Link = unrecorded(Link)
    shape: Shape = unrecorded(Shape)
    machine: Machine = unrecorded(Machine)
    isolation: Isolation = unrecorded(Isolation)
    speed_reference: SpeedReference = unrecorded(SpeedReference)
    peers: list[Peer] = field(default_factory=list)
    methods: dict = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)  # a run over several nodes: each node's outcome

    @classmethod
    def load(cls, path: Path, require: tuple[str, ...] = ()) -> "Summary":
        """A run's summary.json (the file or the run's folder); require: dotted keys it must hold, else SummaryError."""
        path = RunDir(path).summary if Path(path).is_dir() else Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise SummaryError(f"{path}: not a readable summary ({error}); re-run the run to write it") from None
        if not isinstance(data, dict):
            raise SummaryError(f"{path}: not a summary (a JSON {type(data).__name__}); re-run the run to write it")
        missing = [key for key in require if not holds(data, key.split("."))]
        if missing:
            raise SummaryError(f"{path}: no {', '.join(missing)} (written by an older avgbench, or not by one): "
                               "re-run it, or read it with the version that wrote it")
        return cls.from_dict(data)

    def figures(self, *names: str) -> Json:
        """name -> value of these fields (columns named as summary.json names them); an unknown name fails."""
        unknown = set(names) - {f.name for f in fields(self)}
        if unknown:
            raise AttributeError(f"summary.json has no {', '.join(sorted(unknown))}")
        return {name: getattr(self, name) for name in names}

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1, default=str))
