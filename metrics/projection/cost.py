"""A strategy's cost model: what it receives (Cost, Round) and the base class every model extends (CostModel).
Each model sits beside its strategy (strategies/cost_models/NAME.py) and imports only this module and
metrics.summary.bounds (docs/projection.md)."""
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

from metrics.summary.bounds import Round


@dataclass
class Cost:
    """What a strategy's cost model (CostModel.step_time) receives: one step of N workers over links of rate beta,
    with what the calibration run measured (compute, hidden communication, server updates)."""

    workers: int              # N
    size: float               # S: bytes averaged per round (one worker's gradients or parameters)
    rate: float               # beta: link rate, bytes/s per direction (full duplex)
    latency: float = 0.0      # alpha: one-way latency per message, s
    compute: float = 0.0      # s per step outside communication: data + forward/backward + optimizer
    batch: int = 1            # samples per worker and step
    knobs: dict = field(default_factory=dict)  # the strategy's knobs (Strategy.knobs)
    hidden: float = 0.0       # s of communication per step the calibration run ran behind compute (measured)
    server: float = 0.0       # s a server spends on one update (measured on the servers; ps)
    overlap: float = 0.0      # share of a strategy's overlappable transfers the calibration run overlapped (fitted)
    devices_per_node: int = 1  # D: the N workers are N/D nodes of D devices (1: a flat N, one link per worker)
    intra_node_rate: float = 0.0     # beta': bytes/s per direction between the devices of a node
    intra_node_latency: float = 0.0  # alpha': one-way latency per message inside a node, s
    colocated_servers: bool = False  # ps: each server on a node of workers, sharing its link (False: own links)

    @property
    def nodes(self) -> int:
        """M = N/D."""
        return self.workers // self.devices_per_node


def intra_node_s(m: Cost) -> float:
    """2(D-1)·(α' + S/(D·β')): a reduce-scatter and an all-gather of S inside a node of D devices (D-1 steps each, one
    message of S/D bytes on the intra-node link); 0 with one device per node."""
    devices = m.devices_per_node
    return 2 * (devices - 1) * (m.intra_node_latency + m.size / (devices * m.intra_node_rate)) if devices > 1 else 0.0


def ring_allreduce_s(m: Cost) -> float:
    """2(D-1)·(α' + S/(D·β')) + 2(M-1)·(α + S/(M·β)), M = N/D nodes of D devices: inside each node a reduce-scatter
    and an all-gather (D-1 steps each, one message of S/D bytes on the intra-node link β', α'), across the nodes a ring
    all-reduce of each device's S/D shard, the node's D rings sharing its network link β (2(M-1) steps of S/(M·D) per
    ring). One device per node (D = 1) is the flat ring: 2(N-1)·(α + S/(N·β))."""
    return intra_node_s(m) + 2 * (m.nodes - 1) * (m.latency + m.size / (m.nodes * m.rate))


def exposed_s(m: Cost, comm_s: float) -> float:
    """The part of comm_s not hidden behind compute: max(0, comm - hidden), hidden = the communication per step the
    calibration run measured running behind backward (the same compute hides as much at any N)."""
    return max(0.0, comm_s - m.hidden)


class CostModel:
    """A strategy's cost model: the bytes a round puts on each link, the round's link floor and the step time.
    Every method is a class method of the knobs (in Cost.knobs, Round.knobs); the defaults state no model."""

    communicates = True  # false: the strategy moves no bytes (the single-process baseline)
    models_nodes = False  # true: step_time models nodes of several devices (Cost.devices_per_node)

    @classmethod
    def link_bound(cls, r: Round) -> float | None:
        """Lower bound in seconds on one averaging round over links of r.rate bytes/s; None: no formula."""
        return None

    @classmethod
    def bound_formula(cls) -> str | None:
        """The first paragraph of link_bound's docstring: the formula reports state (None: no bound)."""
        if getattr(cls.link_bound, "__func__") is getattr(CostModel.link_bound, "__func__"):
            return None
        return first_paragraph(cls.link_bound)

    @classmethod
    def rounds_overlap(cls, knobs: dict) -> bool:
        """Whether a round can start before the last one ended everywhere (metrics/summary/bounds.py then measures
        link efficiency over the span of the run's rounds, not round by round)."""
        return False

    @classmethod
    def step_time(cls, m: Cost) -> float | None:
        """Predicted seconds per step of one worker among m.workers (compute + exposed communication), the
        model as the docstring's first paragraph and its derivation below it; None: no cost model."""
        return None

    @classmethod
    def fit_overlap(cls, m: Cost, step_s: float) -> float:
        """Cost.overlap fitted on the calibration run (m at its own N and link, step_s its measured mean step), for
        models with an overlap share they do not derive. Default: 0 (nothing fitted)."""
        return 0.0

    @classmethod
    def averaged_bytes(cls, r: Round) -> float:
        """S, the bytes averaged per round, from the largest payload one worker moved in a round (r.payload):
        the inverse of the strategy's payload relation. Default: S = P."""
        return r.payload

    @classmethod
    def warmup_steps(cls, knobs: dict) -> int:
        """The steps before the steady state the model describes: a warm-up of another schedule, and the steady
        schedule's first round (it sets up connections and buffers, and takes longer than the rounds after it). The
        projection measures payload, compute and step time after them.
        Default: 1 (the first step's round)."""
        return 1

    @classmethod
    def steps_per_round(cls, knobs: dict) -> int:
        """Steps from one round to the next in the steady state: the projection times whole periods of them.
        Default: 1 (a round every step)."""
        return 1


class RingAllReduceCost(CostModel):
    """What an all-reduce of S bytes run as a ring implies for one averaging round (allreduce, ring, diloco,
    localsgd)."""

    models_nodes = True  # through ring_allreduce_s

    @classmethod
    def link_bound(cls, r: Round) -> float:
        """P/B, P = 2(N-1)/N x S: a ring all-reduce is N-1 reduce-scatter and N-1 all-gather steps of S/N
        bytes, each worker sending and receiving one piece per step, so its link carries P each way."""
        return r.payload / r.rate

    @classmethod
    def averaged_bytes(cls, r: Round) -> float:
        """S = P·N/(2(N-1)): a ring all-reduce moves 2(N-1)/N·S per worker and direction."""
        return r.payload * r.workers / (2 * (r.workers - 1))


class PeriodicRingAllReduceCost(RingAllReduceCost):
    """One ring all-reduce every steps_per_round steps, nothing between (diloco, localsgd)."""

    @classmethod
    def step_time(cls, m: Cost) -> float:
        """compute + (2(D-1)·(α' + S/(D·β')) + 2(M-1)·(α + S/(M·β))) / H on M = N/D nodes of D devices (D = 1:
        compute + 2(N-1)·(α + S/(N·β)) / H), H = the steps from one all-reduce to the next (steps_per_round)."""
        return m.compute + ring_allreduce_s(m) / cls.steps_per_round(m.knobs)


def first_paragraph(method: Callable[..., object]) -> str | None:
    """A method's docstring's first paragraph on one line (a cost model's formula)."""
    doc = inspect.getdoc(method) or ""
    return " ".join(doc.split("\n\n")[0].split()) or None
