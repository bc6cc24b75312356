"""Helpers shared by the test modules (conftest.py holds only fixtures and hooks).

Nothing here launches a process at import time; the run helpers (run_train, start_train,
cli) do when called, so only integration tests call them.
"""
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import TypeVar

import pytest
import torch
import yaml
from torch import nn
from torch.utils.data import TensorDataset

ROOT = Path(__file__).resolve().parent.parent

# conftest put ROOT on sys.path
from job.evaluation import Evaluator, MachineBoard, MachineEvaluation, Snapshots  # noqa: E402
from job.model import tiny  # noqa: E402
from job.process import processes_of_run  # noqa: E402
from metrics.recording.jsonl import read_jsonl  # noqa: E402
from metrics.recording.rundir import WORKER, LaunchSpec, PeerDir, RunDir  # noqa: E402
from bench.run_folders import report_config, write_report_run, write_sweep  # noqa: E402,F401

# Small and quick: the tiny CNN on digits, frequent samples, loopback (a test of the emulated links asks for them:
# a later network=... wins).
QUICK = ["model=tiny", "eval_every=10", "sampler.interval=0.2", "progress=false", "network=loopback"]

# The tiny CNN (job/model.py) on digits (1 channel, 10 classes), counted by hand from its layers:
#   conv 1->16 3x3 no bias 144 | BN(16) 32 | conv 16->32 3x3 no bias 4608 | BN(32) 64 | linear 512->10 5130
TINY_DIGITS_PARAMS = 144 + 32 + 4608 + 64 + 5130  # 9978
TINY_DIGITS_BYTES = 4 * TINY_DIGITS_PARAMS         # float32: 39912
# its trainable parameter shapes: conv, BN weight and bias, conv, BN, linear
TINY_SHAPES = [(16, 1, 3, 3), (16,), (16,), (32, 16, 3, 3), (32,), (32,), (10, 512), (10,)]


def powersgd_floats(shapes, rank: int) -> int:
    """Floats torch's PowerSGD all-reduces per step for gradients of these shapes, derived by hand (a comm hook
    hands the all-reduce 4 bytes x 9978 parameters = 39912 per step without compression, 2 x 9978 = 19956 with
    fp16 or bf16). PowerSGD views each gradient of 2+ dimensions as an n x m matrix (n = its first dimension) and
    all-reduces P (n x r) and Q (m x r) instead, if (n + m) r x 2 < n m (min_compression_rate 2); 1-dimensional
    gradients go uncompressed. Plain all-reduce for the first powersgd_start_iter steps."""
    total = 0
    for shape in shapes:
        numel = 1
        for d in shape:
            numel *= d
        if len(shape) < 2:
            total += numel
            continue
        n, m = shape[0], numel // shape[0]
        r = min(n, m, rank)
        total += (n + m) * r if (n + m) * r * 2 < n * m else numel
    return total



HAS_GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU (torch sees none here)")
needs_no_gpu = pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")


# --- the strategies: conf/strategy/NAME.yaml -------------------------------------------
def strategy_names() -> list[str]:
    """Every strategy of conf/strategy/ (one NAME.yaml each)."""
    from launchers.config import group_options

    return group_options("strategy")


def strategy_of(name: str):
    """The class the config of strategy NAME names (without composing a config)."""
    from launchers.config import strategy_by_name

    return strategy_by_name(name)


def cost_model_of(name: str):
    """The cost model the config of strategy NAME names (strategy.cost_model)."""
    from launchers.plugins import strategy_configs
    from metrics.projection.models import cost_model

    return cost_model(yaml.safe_load(strategy_configs()[name].read_text())["strategy"])


def quick_run(name: str) -> list[str]:
    """Overrides for a short run of a strategy: its choice and what it declares keeps the run short (`quick`)."""
    return [f"strategy={name}", *strategy_of(name).quick]


# strategy=hivemind on loopback: 2 peers x 32 samples and a 64-sample target give one step per peer per epoch.
HIVE = quick_run("hivemind")


# --- running train.py ---------------------------------------------------------------
def train_command(run_dir: Path, *overrides: str) -> list[str]:
    return [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run_dir}", *QUICK, *overrides]


def run_train(run_dir: Path, *overrides: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(train_command(run_dir, *overrides), cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, check=False)


def start_train(run_dir: Path, *overrides: str, **popen) -> subprocess.Popen:
    return subprocess.Popen(train_command(run_dir, *overrides), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, **popen)


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """train.py with exactly these arguments (no QUICK defaults)."""
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False)


Found = TypeVar("Found")


def settled(probe: Callable[[], Found], within_s: float, every_s: float = 0.2) -> Found:
    """probe() until it finds nothing (an empty list or set) or within_s has passed; what it found last."""
    deadline = time.monotonic() + within_s
    while (found := probe()) and time.monotonic() < deadline:
        time.sleep(every_s)
    return found


def wait_for_steps(run_dir: Path, rank: int, count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while len(read_jsonl(run_dir / f"peer{rank}" / "steps.jsonl")) < count:
        assert time.monotonic() < deadline, f"peer{rank} did not reach {count} steps"
        time.sleep(0.2)


# --- what a run left --------------------------------------------------------------------
def leftover_processes(run_dir: Path) -> list:
    """Processes still carrying the run's id (workers, daemons, MPI helpers)."""
    run_id = (run_dir / ".avgbench" / "run_id").read_text()
    return processes_of_run(run_id)


def assert_no_leftovers(run_dir: Path, settle_s: float = 5.0) -> None:
    left = settled(lambda: leftover_processes(run_dir), settle_s)
    assert not left, f"processes left behind: {[(p.pid, p.name()) for p in left]}"


def write_run(path, target: str, knobs: dict, workers: int, payload: int | list[int], mbit: float | None, train_s: list,
              summary: dict | None = None, step: dict | None = None, config: dict | None = None,
              launch: dict | None = None, mtu: int | None = None):
    """A finished run as train.py leaves it: summary, config, launch spec, network, per-worker step and eval logs.
    Every step: data 0.01 s, compute 0.04 s, opt 0 s, `payload` bytes each way (or payload[k] on step k + 1),
    batch 32, and `step`'s fields;
    train_s: one list for every worker, or one list per worker; the target is reached at the last step; config and
    launch: fields added to (or replacing) the config's and the launch spec's; mtu: the hosts' frame size (None: not
    recorded)."""
    per_worker = train_s if isinstance(train_s[0], list) else [train_s] * workers
    steps = len(per_worker[0])
    payloads = payload if isinstance(payload, list) else [payload] * steps
    config = {"strategy": {"name": target.split(".")[1].split(":")[0], "target": target},
              "network": {"name": "emulated", "bandwidth_mbit": mbit, "latency_ms": 0}, "peers": workers} | (config or {})
    (path / ".avgbench").mkdir(parents=True)
    (path / ".avgbench" / "config.yaml").write_text(yaml.safe_dump(config))
    LaunchSpec(**{"batch_size": 32, "roles": [WORKER] * workers, "threads": 1, "effective_batch": 32 * workers}
               | (launch or {})).save(RunDir(path))
    hosts = [{"index": i, "bandwidth_mbit": mbit, "latency_ms": 0.0} | ({"mtu": mtu} if mtu else {})
             for i in range(workers + 1)]
    (path / ".avgbench" / "network.json").write_text(json.dumps({"hosts": hosts}))
    (path / "summary.json").write_text(json.dumps({"config": config, "strategy_knobs": knobs,
                                                   "steps_to_target": steps, "samples_to_target": workers * 32 * steps,
                                                   "workers": workers} | (summary or {})))
    for rank in range(workers):
        peer = path / f"peer{rank}"
        peer.mkdir()
        peer.joinpath("steps.jsonl").write_text("".join(json.dumps(
            {"step": k + 1, "train_s": t, "samples": 32 * (k + 1), "data_s": 0.01, "compute_s": 0.04, "opt_s": 0.0,
             "comm_s": 1.0, "bytes_sent": payloads[k], "bytes_recv": payloads[k], "round": None} | (step or {})) + "\n"
            for k, t in enumerate(per_worker[rank])))
        peer.joinpath("eval.jsonl").write_text(json.dumps({"step": steps, "samples": 32 * steps}) + "\n")


def summary_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def assert_cpu_faithful_unless_others(summary: dict) -> None:
    """The run's CPU fidelity held, unless other work on the machine (not the run's own processes: the machine
    section leaves those out) or the hypervisor took CPU during it: then an unfaithful mark is the right answer."""
    isolation, machine = summary["isolation"], summary["machine"]
    if machine["alone"] is False:
        return
    shown = [{k: r[k] for k in ("rank", "distortion", "received_share", "wait_beyond_quota_s", "other_on_cores_s",
                                "irq_on_cores_s", "in_group_s")} for r in isolation["by_rank"]]
    assert isolation["faithful"] is True, (isolation["unfaithful"], shown, machine)


def launch_spec_of(run_dir: Path) -> LaunchSpec:
    return LaunchSpec.load(RunDir(run_dir))


def steps_of(run_dir: Path, rank: int) -> list[dict]:
    return read_jsonl(run_dir / f"peer{rank}" / "steps.jsonl")


def results(run_dir: Path, ranks) -> list[dict]:
    """Each rank's peer<RANK>/result.json."""
    return [json.loads((run_dir / f"peer{r}" / "result.json").read_text()) for r in ranks]


def param_digests(run_dir: Path, ranks) -> list[str]:
    return [r["param_sha256"] for r in results(run_dir, ranks)]


def run_two_peers_that_learn_and_agree(run_dir: Path, *overrides: str) -> dict:
    """A run of two peers that ends with equal parameters on both and the worst worker's accuracy at least 0.6
    (10 classes: chance is 0.1); its summary."""
    result = run_train(run_dir, "peers=2", "eval_every=0", *overrides)
    assert result.returncode == 0, result.stderr
    summary = summary_of(run_dir)
    assert summary["accuracy_by_worker"]["worst"] >= 0.6, summary["accuracy_by_worker"]
    digests = param_digests(run_dir, (0, 1))
    assert digests[0] == digests[1]
    return summary


# --- config without a process ---------------------------------------------------------
def compose_config(*overrides: str, return_hydra_config: bool = False):
    """The config train.py would compose for these overrides (in this process, no run)."""
    from launchers.config import compose_config as compose

    return compose(list(overrides), return_hydra_config)


def refused(*overrides: str) -> str:
    """The one-line error train.py gives for these overrides before anything starts (launchers.config.check_command)."""
    from job.errors import ConfigError
    from launchers.config import check_command

    with pytest.raises(ConfigError) as caught:
        check_command(list(overrides))
    return str(caught.value)


def toy_batch(step: int, worker: int, sizes=(3, 5, 8)):
    """A deterministic batch of 6 features and 3 classes for the toy model of the collective tests."""
    import torch

    gen = torch.Generator().manual_seed(1000 * step + worker)
    size = sizes[worker]
    return torch.randn(size, 6, generator=gen), torch.randint(0, 3, (size,), generator=gen)


def toy_sgd(params):
    import torch

    return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-3)


def worker_tensor(rank: int):
    """Worker `rank`'s vector in the stepwise round tests: 3 x 37 floats (444 bytes), distinct per rank."""
    import torch

    return torch.randn(3, 37, generator=torch.Generator().manual_seed(100 + rank))


def stepwise_rounds(transport, chunks: int) -> list:
    """Every ring rotation of a world, one pass then with second_pass: [(second_pass, ring, RoundResult)]."""
    import torch

    from strategies.stepwise import ring_order, ring_round

    n = transport.world_size
    mine = worker_tensor(transport.rank)
    results = []
    for second_pass in (False, True):
        for round_index in range(n):
            ring = ring_order(n, round_index, rotate=True)
            results.append((second_pass, ring, ring_round(transport, mine, ring, chunks, second_pass)))
    assert torch.equal(mine, worker_tensor(transport.rank))  # the input is left alone
    return results


# --- run folders for the report, without training: bench/run_folders.py ------------------
def report_of(*dirs: Path, out: Path) -> str:
    """The report over these directories (metrics.report.build_report, no process): its report.md."""
    from metrics.report import build_report

    build_report(list(dirs), out)
    return (out / "report.md").read_text()


# --- evaluation snapshots (job/evaluation.py) ------------------------------------------
CPU = torch.device("cpu")


def images(count: int, seed: int, shift: float = 0.0) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(count, 1, 8, 8, generator=gen) * 2 + shift,
                         torch.randint(0, 10, (count,), generator=gen))


def trained_on(model: nn.Module, data: TensorDataset) -> nn.Module:
    """The model after a few training-mode forward passes: its BatchNorm running statistics are data's."""
    model.train()
    with torch.no_grad():
        for x in data.tensors[0].split(16):
            model(x)
    return model


class CountingEvaluator(Evaluator):
    """An evaluator that remembers the state (parameters and buffers, as saved) of every snapshot it evaluated."""

    def __init__(self, *args):
        super().__init__(*args)
        self.states = []

    def __call__(self, path):
        saved = torch.load(path, weights_only=True)
        self.states.append(b"".join(v.numpy().tobytes() for k, v in saved.items() if "running" not in k
                                    and "num_batches" not in k))
        return super().__call__(path)


def machine_evaluation(board_dir, rank, test, precise, patience_s=60.0, counting=False, all_trained=None,
                       host=None) -> MachineEvaluation:
    board = MachineBoard(board_dir, rank, host)
    board.register()
    torch.manual_seed(1)
    evaluator = (CountingEvaluator if counting else Evaluator)(tiny(10, 1), test, CPU, precise)
    return MachineEvaluation(board, evaluator, patience_s, all_trained)


def pausing_worker(board_dir, rank, cores, test):
    """A worker's PauseSharing on a board shared through files, with an evaluator that counts its evaluations and
    the cores it was given (on_cores) instead of moving the thread."""
    from job.evaluation import PauseSharing

    board = MachineBoard(board_dir, rank)
    board.register(cores)
    given, aside = [], []

    def on_cores(slot):
        given.append(slot)
        return contextlib.nullcontext()

    def set_aside():
        aside.append(rank)
        return contextlib.nullcontext()

    torch.manual_seed(1)
    evaluator = CountingEvaluator(tiny(10, 1), test, CPU, None)
    return PauseSharing(board, patience_s=20.0, on_cores=on_cores, set_aside=set_aside), evaluator, given, aside


def trajectory(peer: PeerDir, steps, statistics_seed: int, precise: bool = True, parameters_seed: int = 0) -> Snapshots:
    """Snapshots of a model whose parameters change at every step the same way for a given parameters_seed (the
    states of a synchronous strategy's workers), while its BatchNorm statistics come from each worker's own batches
    (statistics_seed)."""
    torch.manual_seed(parameters_seed)
    model = tiny(10, 1)
    snapshots = Snapshots(peer.snapshots, CPU, precise=precise)
    for step in steps:
        with torch.no_grad():
            model[-1].bias += 0.3 * step
        trained_on(model, images(32, seed=statistics_seed + step))
        snapshots.take(model, step=step, wall_s=float(step), train_s=float(step), samples=32 * step)
    return snapshots


# --- what the projection reads from bench/results.json ------------------------------------
def validation_case(strategy: str, peers: int, error: float, role: str = "held-out", counted: bool = True,
                    link_mbit: float = 20, **more) -> dict:
    """A row of the projection validation (bench/projection.py): by default at wire/compute 10 with S = 1 MB."""
    return {"model": "mlp", "strategy": strategy, "peers": peers, "link_mbit": link_mbit, "role": role,
            "counted": counted, "faithful": counted, "calibration_link_mbit": 20, "error": error,
            "wire_over_compute": 10.0, "size_bytes": 1e6} | more


def write_results(path: Path, rows: list[dict], payload_share: float = 0.8) -> Path:
    """A results file as the projection reads it: the payload share, the same in standard and jumbo frames
    (link_goodput), and a projection validation of these rows, with the figures and verdicts bench/projection.py saves
    with them."""
    from bench.projection import figures_of

    by_mtu = {mtu: {"payload_share": payload_share} for mtu in ("1500", "9000")}
    path.write_text(json.dumps({"results": [
        {"name": "link_goodput", "payload_share": payload_share, "by_mtu": by_mtu, "measured_at": "then"},
        {"name": "projection_validation", "measured_at": "then", "rows": rows} | figures_of(rows)]}))
    return path


def summary_outcome(status="completed", ended_at=1000.0):
    """A run's outcome as build_summary receives it."""
    return SimpleNamespace(status=status, exit_code=0 if status == "completed" else 1, error=None,
                           failed_rank=None, lost_peers=[], wall_s=9.0, ended_at=ended_at)


def summary_config(metric="test_accuracy", value=0.6):
    """The config keys build_summary reads."""
    return {"target": {"metric": metric, "value": value}, "data": {"name": "digits"},
            "network": {"name": "loopback"}, "strategy": {"name": "allreduce"}, "peers": 2}


def write_lines(path, records):
    """JSON lines, one record a line (a peer's log)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
