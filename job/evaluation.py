"""Held-out evaluation of the loop's snapshots: after training, one machine's workers share them through files
(MachineBoard), or each as it is taken (InTraining). See docs/usage.md (Evaluation)."""
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterable, Iterator

import numpy as np
import psutil
import torch
from torch import nn
from torch.utils.data import DataLoader, Subset

from job.data import Samples
from job.model import state_digest
from job.process import boot_id, core_slot
from metrics.recording.steplog import StepLog
from metrics.summary.target import crossing_step, meets

PRECISE_BN_SUBSET_SEED = 0  # the training subset of precise BatchNorm: the same for every run and seed
EVALUATION_BATCH = 32  # held-out samples per forward pass
Record = dict[str, Any]  # an evaluation's figures, or a board's JSON file
Outcome = dict[str, np.ndarray]  # each test sample's: correct, loss


@torch.no_grad()
def evaluate(model: nn.Module, dataset: Samples, device: torch.device,
             batch_size: int = EVALUATION_BATCH) -> tuple[Record, Outcome]:
    """The held-out split's test_loss, test_accuracy and test_samples, and each sample's outcome (correct, loss)."""
    was_training = model.training
    model.eval()
    dtype = next(model.parameters()).dtype
    losses, hits = [], []
    for x, y in DataLoader(dataset, batch_size=batch_size):
        x, y = x.to(device, dtype), y.to(device)
        out = model(x)
        losses.append(nn.functional.cross_entropy(out, y, reduction="none").double().cpu())
        hits.append((out.argmax(1) == y).cpu())
    model.train(was_training)
    loss, correct = torch.cat(losses), torch.cat(hits)
    figures = {"test_loss": loss.sum().item() / len(loss), "test_accuracy": correct.sum().item() / len(correct),
               "test_samples": len(correct)}
    return figures, {"correct": correct.numpy(), "loss": loss.float().numpy()}


def batch_norm_layers(model: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    return [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]


def snapshot_key(model: nn.Module, precise: bool) -> str:
    """The digest of what evaluating the model depends on (BatchNorm statistics aside if precise BN recomputes them)."""
    layers = set(batch_norm_layers(model)) if precise else set()
    recomputed = frozenset(f"{name}.{buffer}" for name, m in model.named_modules() if m in layers
                           for buffer in ("running_mean", "running_var", "num_batches_tracked"))
    return state_digest(model, recomputed)


class PreciseBatchNorm:
    def __init__(self, dataset: Samples, samples: int, batch_size: int, device: torch.device):
        order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(PRECISE_BN_SUBSET_SEED))
        batches = min(samples, len(dataset)) // batch_size
        subset = Subset(dataset, order[:batches * batch_size].tolist())
        self.batches = [x.to(device) for x, _ in DataLoader(subset, batch_size=batch_size)]

    @torch.no_grad()
    def __call__(self, model: nn.Module) -> None:
        layers = batch_norm_layers(model)
        if not layers:
            return
        momenta = [m.momentum for m in layers]
        for m in layers:
            m.reset_running_stats()
            m.momentum = None  # a cumulative mean over the batches
        was_training = model.training
        model.train()
        dtype = next(model.parameters()).dtype
        for x in self.batches:
            model(x.to(dtype=dtype))
        for m, momentum in zip(layers, momenta):
            m.momentum = momentum
        model.train(was_training)


class Evaluator:
    """Evaluates saved weights in a model of its own: precise BatchNorm (where given), then the held-out split."""

    def __init__(self, model: nn.Module, dataset: Samples, device: torch.device, precise: PreciseBatchNorm | None):
        self.model, self.dataset, self.device, self.precise = model, dataset, device, precise
        self.precise_bn_s = self.test_s = 0.0  # summed over its evaluations: precise BN, and loading and testing

    def __call__(self, path: Path) -> tuple[Record, Outcome]:
        """The figures of the weights in `path` (evaluate's, state_sha256, precise_bn_s, eval_s) and outcome."""
        started = time.perf_counter()
        self.model.load_state_dict(torch.load(path, map_location=self.device, weights_only=True))
        loaded = time.perf_counter()
        if self.precise:
            self.precise(self.model)
        recomputed = time.perf_counter()
        figures, outcome = evaluate(self.model, self.dataset, self.device)
        figures |= {"state_sha256": state_digest(self.model), "precise_bn_s": recomputed - loaded,
                    "eval_s": time.perf_counter() - started}
        self.precise_bn_s += figures["precise_bn_s"]
        self.test_s += figures["eval_s"] - figures["precise_bn_s"]
        return figures, outcome


@dataclass
class Snapshot:
    path: Path
    clock: dict[str, float]  # step, wall_s, train_s, samples at the moment it was taken
    snapshot_s: float  # the training pause it cost
    key: str  # snapshot_key: equal keys evaluate identically


def process_alive(pid: int, started: float) -> bool:
    """Whether the process `pid`, started at `started` (psutil's create_time), still runs (a zombie does not)."""
    try:
        process = psutil.Process(pid)
        return process.create_time() == started and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def this_process() -> dict[str, float]:
    return {"pid": os.getpid(), "started": psutil.Process().create_time()}


def write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """`write(temporary path)`, then rename it to `path`: readers see the whole file or none."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    write(temporary)
    os.replace(temporary, path)


class MachineBoard:
    """RUN/.avgbench/evaluation/MACHINE/, where one machine's workers share their evaluations: worker<R>.json (its
    process, host and the host's cores, before it trains), snapshots<R>.json (step, key, path of each, once trained),
    pause<STEP>.<R>.json (the key of its state at a pause in training), <key>.claim (who evaluates that state after
    training; the first to create it), <key>.json and .npz (its figures, and each test sample's outcome)."""

    def __init__(self, directory: Path, rank: int, host: str | None = None):
        self.directory, self.rank = Path(directory), rank
        self.host = host or socket.gethostname()  # this worker's host: an emulated host's own name

    @staticmethod
    def machine_name() -> str:
        """This machine's folder: boot id and PID namespace (sharing them, processes share cores and see PIDs)."""
        return f"boot-{boot_id()}.pidns-{os.stat('/proc/self/ns/pid').st_ino}"

    def _write_json(self, path: Path, record: Record) -> None:
        write_atomically(path, lambda tmp: tmp.write_text(json.dumps(record)))

    def _read_json(self, path: Path) -> Record | None:
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return None

    def register(self, cores: list[int] | None = None) -> None:
        """Before training: this worker's process, host and the host's cores (default: this process's)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._write_json(self.directory / f"worker{self.rank}.json", {
            "rank": self.rank, "host": self.host, "cores": sorted(os.sched_getaffinity(0)) if cores is None else cores,
            **this_process()})

    def workers_cores(self) -> list[int]:
        """The cores of the hosts of every worker registered on this machine."""
        workers = (self._read_json(path) for path in self.directory.glob("worker*.json"))
        return sorted({core for w in workers if w for core in w.get("cores", [])})

    def pause(self, step: int, key: str) -> None:
        self._write_json(self.directory / f"pause{step}.{self.rank}.json", {"key": key})

    def paused(self, step: int, patience_s: float) -> dict[int, str]:
        """rank -> key of this machine's workers at the pause of `step`: once every live one has paused there, or
        patience_s has passed (then those that have)."""
        deadline = time.monotonic() + patience_s
        while True:
            keys = {int(path.name.split(".")[1]): record["key"] for path in self.directory.glob(f"pause{step}.*.json")
                    if (record := self._read_json(path))}
            if set(self.live_workers()) <= set(keys) or time.monotonic() > deadline:
                return keys
            time.sleep(PAUSE_POLL_S)

    def publish(self, snapshots: list[Snapshot]) -> None:
        self._write_json(self.directory / f"snapshots{self.rank}.json", {
            "rank": self.rank, "ended_at": time.time(),
            "snapshots": [{"step": s.clock["step"], "key": s.key, "path": str(s.path)} for s in snapshots]})

    def manifests(self) -> list[Record]:
        """What the workers that ended training published (rank, ended_at, snapshots)."""
        return [m for path in self.directory.glob("snapshots*.json") if (m := self._read_json(path))]

    def live_workers(self) -> dict[int, Record]:
        """The other registered workers still running: rank -> {host, published (its snapshots)}."""
        workers = (self._read_json(path) for path in self.directory.glob("worker*.json"))
        return {w["rank"]: {"host": w["host"], "published": (self.directory / f"snapshots{w['rank']}.json").exists()}
                for w in workers if w and w["rank"] != self.rank and process_alive(w["pid"], w["started"])}

    def offered(self, ranks: Iterable[int]) -> list[tuple[str, str]]:
        """(key, path) of the snapshots the workers `ranks` published, each in step order, rank by rank."""
        manifests = (self._read_json(self.directory / f"snapshots{rank}.json") for rank in sorted(ranks))
        return [(s["key"], s["path"]) for m in manifests if m for s in m["snapshots"]]

    def claim(self, key: str) -> bool:
        """Take the evaluation of `key`: True for the first to ask only (a hard link: a claim appears whole)."""
        written = self.directory / f".{key}.claim.{os.getpid()}"
        written.write_text(json.dumps({"rank": self.rank, **this_process(), "at": time.time()}))
        try:
            os.link(written, self.directory / f"{key}.claim")
            return True
        except FileExistsError:
            return False
        finally:
            written.unlink()

    def abandoned(self, key: str, patience_s: float) -> bool:
        """Whether the evaluation of `key` was claimed by a process that has died, or longer than patience_s ago."""
        claim = self._read_json(self.directory / f"{key}.claim")
        if claim is None:  # not claimed: nobody to wait for
            return False
        return not process_alive(claim["pid"], claim["started"]) or time.time() - claim["at"] > patience_s

    def post(self, key: str, record: Record, outcome: Outcome) -> None:
        def write_outcome(path: Path) -> None:
            with open(path, "wb") as f:
                np.savez(f, **outcome)  # type: ignore[arg-type]  # numpy's stubs: a key might be allow_pickle

        write_atomically(self.directory / f"{key}.npz", write_outcome)
        self._write_json(self.directory / f"{key}.json", record | {"evaluated_by": self.rank, "posted_at": time.time()})

    def posted(self, key: str) -> bool:
        return (self.directory / f"{key}.json").exists()

    def record(self, key: str) -> Record | None:
        """The posted evaluation of `key`: its figures, evaluated_by, posted_at (None: not posted)."""
        return self._read_json(self.directory / f"{key}.json")

    def result(self, key: str) -> tuple[Record, Outcome] | None:
        """The posted evaluation of `key` (its record, each test sample's outcome), or None."""
        record = self.record(key)
        if record is None:
            return None
        with np.load(self.directory / f"{key}.npz") as saved:
            return record, {name: saved[name] for name in saved.files}


@dataclass
class EvaluationState:
    """How far the evaluation of a run's snapshots is, from its machines' boards (for the launcher's progress)."""
    ended: set[int]  # workers whose training ended (they published their snapshots)
    states: int  # distinct snapshot states they published
    evaluated: int  # of those, evaluated
    since: float | None  # unix time the first of them ended training
    last_posted: float | None  # unix time of the latest evaluation


def evaluation_state(run_evaluation: Path) -> EvaluationState:
    ended, states, evaluated, since, last = set(), 0, 0, [], []
    for directory in sorted(p for p in Path(run_evaluation).glob("*") if p.is_dir()):
        board = MachineBoard(directory, rank=-1)
        manifests = board.manifests()
        ended |= {m["rank"] for m in manifests}
        since += [m["ended_at"] for m in manifests]
        keys = {s["key"] for m in manifests for s in m["snapshots"]}
        posted = [record for key in keys if (record := board.record(key))]
        states, evaluated = states + len(keys), evaluated + len(posted)
        last += [r["posted_at"] for r in posted]
    return EvaluationState(ended, states, evaluated, min(since, default=None), max(last, default=None))


POLL_S = 0.05  # how often a waiting worker looks at the board
PAUSE_POLL_S = 0.01  # how often a worker in a pause looks for the others' (every worker waits for the last)


class PauseSharing:
    """eval_in_training on one machine: at each pause, each distinct state of its workers is evaluated once, by the
    lowest rank holding it, on that state's share of the cores of the machine's workers; the others wait for it."""

    def __init__(self, board: MachineBoard, patience_s: float, on_cores: Callable[[list[int]], ContextManager[None]],
                 set_aside: Callable[[], ContextManager[None]]):
        self.board, self.patience_s = board, patience_s
        self.on_cores = on_cores  # evaluate within it on those cores
        self.set_aside = set_aside  # the whole evaluation within it: not the run's CPU
        self.evaluated = 0  # evaluations done here
        self.longest_s = 0.0  # the longest evaluation seen

    def evaluate(self, snapshot: Snapshot, evaluator: Evaluator) -> tuple[Record, Outcome]:
        step, board = int(snapshot.clock["step"]), self.board
        with self.set_aside():
            board.pause(step, snapshot.key)
            holders: dict[str, list[int]] = {}
            for rank, key in sorted(board.paused(step, self.patience_s).items()):
                holders.setdefault(key, []).append(rank)
            evaluator_rank = holders[snapshot.key][0]
            if posted := board.result(snapshot.key):  # the state of an earlier pause
                record, outcome = posted
            elif evaluator_rank == board.rank:
                record, outcome = self._evaluate_here(snapshot, evaluator, list(holders).index(snapshot.key),
                                                      len(holders))
            else:
                record, outcome = self._wait_for(snapshot, evaluator, evaluator_rank)
        self.longest_s = max(self.longest_s, record["eval_s"])
        return record, outcome

    def _evaluate_here(self, snapshot: Snapshot, evaluator: Evaluator, index: int,
                       states: int) -> tuple[Record, Outcome]:
        """Evaluate on the `index`-th of `states` equal shares of the workers' cores, and post it."""
        cores = self.board.workers_cores()
        slot = core_slot(index, max(1, len(cores) // states), cores)
        with self.on_cores(slot):
            record, outcome = evaluator(snapshot.path)
        record |= {"evaluated_by": self.board.rank, "evaluated_on": slot}
        self.board.post(snapshot.key, record, outcome)
        self.evaluated += 1
        return record, outcome

    def _wait_for(self, snapshot: Snapshot, evaluator: Evaluator, evaluator_rank: int) -> tuple[Record, Outcome]:
        """The evaluation of the snapshot's state that `evaluator_rank` posts; evaluated here if it died or stalls."""
        deadline = time.monotonic() + max(self.patience_s, 3 * self.longest_s)
        while (posted := self.board.result(snapshot.key)) is None:
            if time.monotonic() > deadline or evaluator_rank not in self.board.live_workers():
                return self._evaluate_here(snapshot, evaluator, 0, 1)
            time.sleep(POLL_S)
        return posted


class MachineEvaluation:
    def __init__(self, board: MachineBoard, evaluator: Evaluator, patience_s: float,
                 all_trained: Callable[[int], None] | None = None):
        self.board, self.evaluator, self.patience_s = board, evaluator, patience_s
        self.all_trained = all_trained  # called once all live workers trained, with how many are on this host
        self.evaluated = 0  # evaluations done here
        self.longest_s = 0.0  # the longest of them

    def _evaluate(self, key: str, path: str) -> None:
        try:
            record, outcome = self.evaluator(Path(path))
        except FileNotFoundError:  # another worker's snapshot, deleted: its evaluation was posted meanwhile
            if not self.board.posted(key):
                raise
            return
        self.board.post(key, record, outcome)
        self.evaluated += 1
        self.longest_s = max(self.longest_s, record["eval_s"])

    def _claim_next(self, pending: list[Snapshot], helped: list[int]) -> tuple[str, str] | None:
        """Claim the first unclaimed state of `pending`, then of the snapshots the workers `helped` published."""
        for key, path in [(s.key, str(s.path)) for s in pending] + self.board.offered(helped):
            if not self.board.posted(key) and self.board.claim(key):
                return key, path
        return None

    def run(self, own: list[Snapshot]) -> Iterator[tuple[Snapshot, Record, Outcome] | str]:
        """Publish `own`, then evaluate, wait and help until all of `own` is evaluated and no live worker of the machine
        has anything to claim; yields (snapshot, record, outcome) of each of `own` in order, "evaluated", "waiting"."""
        self.board.publish(own)
        pending = list(own)
        while True:
            while pending and (posted := self.board.result(pending[0].key)):
                yield pending.pop(0), *posted
            others = self.board.live_workers()
            others_trained = all(w["published"] for w in others.values())
            if self.all_trained and others_trained:
                self.all_trained(1 + sum(w["host"] == self.board.host for w in others.values()))
                self.all_trained = None
            work = self._claim_next(pending, [rank for rank, w in others.items() if w["published"]])
            if work is None and pending and self.board.abandoned(pending[0].key,
                                                                 max(self.patience_s, 3 * self.longest_s)):
                work = pending[0].key, str(pending[0].path)  # its evaluator died or stalls: evaluate it here
            if work is not None:
                self._evaluate(*work)
                yield "evaluated"
            elif pending or not others_trained:  # own evaluations held by others, or workers still training
                yield "waiting"
            else:
                return


@dataclass
class InTraining:
    """eval_in_training: where to log each evaluation, and the target whose confirmed crossing ends the run."""
    evaluator: Evaluator
    log: StepLog
    target: dict[str, Any]  # the config's target block: metric, value, a causal estimator
    keep_in: Path | None = None
    sharing: PauseSharing | None = None  # each state evaluated once by the machine's workers (None: each its own)


class Snapshots:
    """A worker's saved weights, taken during training and evaluated after it, or when taken (in_training)."""

    def __init__(self, directory: Path, device: torch.device, precise: bool):
        self.directory, self.device, self.precise = directory, device, precise
        self.taken: list[Snapshot] = []
        self.training_started = 0.0  # perf_counter at the start of training: the clock of wall_s
        self.in_training: InTraining | None = None
        self.curve: list[tuple[float, float]] = []  # in training: (step, target metric) of each evaluation
        self.outcomes: list[Outcome] = []  # in training: each evaluation's test sample outcomes
        self.in_training_s = 0.0  # in training: the summed evaluation pauses
        self.target_reached = False  # in training: the estimator confirmed the crossing
        self.at_target = False  # in training: the latest evaluation is at the target
        self.start: Snapshot | None = None  # in training: the first snapshot, held until the next is evaluated
        self.unlogged: tuple[Snapshot, Record] | None = None  # ... and that one's evaluation, logged after the start's

    def take(self, model: nn.Module, hold: bool = False, **clock: float) -> None:
        """Save the model's state and key; in training, evaluate it, or `hold` it (the first snapshot: evaluated
        only where the crossing needs it, settle_start)."""
        started = time.perf_counter()
        self.training_started = started - clock["wall_s"]
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"step{clock['step']:07d}.pt"
        torch.save(model.state_dict(), path)
        key = snapshot_key(model, self.precise)
        snapshot = Snapshot(path, clock, time.perf_counter() - started, key)
        if self.in_training and hold:
            self.start = snapshot
            return
        self.taken.append(snapshot)
        if self.in_training:
            self._evaluate_now(snapshot, self.in_training)

    @property
    def start_needed(self) -> bool:
        """Whether the held start is needed: the first evaluation is at the target, so the crossing lies before it
        (target.py interpolates from the evaluation before; docs/usage.md, Evaluation)."""
        return self.start is not None and len(self.curve) == 1 and self.at_target

    def settle_start(self, needed: bool) -> None:
        """Once the first snapshot after the held start is evaluated: evaluate the start (`needed` by any worker) or
        delete it, then log that snapshot's evaluation, so that eval.jsonl stays in step order."""
        here = self.in_training
        if self.start is None or self.unlogged is None or here is None:
            return
        start, self.start = self.start, None
        if needed:
            record, outcome = self._evaluated(start, here)
            self._logged(start, record, here.log, here.keep_in)
            self.taken.insert(0, start)
            self.outcomes.insert(0, outcome)
            self.curve.insert(0, (start.clock["step"], record[here.target["metric"]]))
            self._note_crossing(here)
        else:
            start.path.unlink(missing_ok=True)
        (snapshot, record), self.unlogged = self.unlogged, None
        self._logged(snapshot, record, here.log, here.keep_in)

    def _evaluated(self, snapshot: Snapshot, here: InTraining) -> tuple[Record, Outcome]:
        started = time.perf_counter()
        with torch.random.fork_rng(devices=[]):  # training's random draws stay as they would be without it
            evaluated = (here.sharing.evaluate(snapshot, here.evaluator) if here.sharing
                         else here.evaluator(snapshot.path))
        self.in_training_s += time.perf_counter() - started
        return evaluated

    def _note_crossing(self, here: InTraining) -> None:
        steps, values = zip(*self.curve)
        self.target_reached = crossing_step(steps, values, here.target) is not None
        self.at_target = meets(values[-1], here.target)

    def _evaluate_now(self, snapshot: Snapshot, here: InTraining) -> None:
        """Evaluate the snapshot just taken, log it (after the held start is settled), and note whether the curve so
        far reached the target."""
        record, outcome = self._evaluated(snapshot, here)
        if self.start is not None:
            self.unlogged = snapshot, record
        else:
            self._logged(snapshot, record, here.log, here.keep_in)
        self.outcomes.append(outcome)
        self.curve.append((snapshot.clock["step"], record[here.target["metric"]]))
        self._note_crossing(here)

    def _logged(self, snapshot: Snapshot, record: Record, log: StepLog, keep_in: Path | None) -> None:
        """Log a snapshot's evaluation to eval.jsonl; delete the snapshot (or move it into keep_in)."""
        log.eval(**snapshot.clock, **{k: v for k, v in record.items() if k != "posted_at"},
                 snapshot_key=snapshot.key, snapshot_s=snapshot.snapshot_s,
                 evaluated_at_s=time.perf_counter() - self.training_started)
        if keep_in:
            keep_in.mkdir(parents=True, exist_ok=True)
            snapshot.path.rename(keep_in / snapshot.path.name)
        else:
            snapshot.path.unlink()

    def save_outcomes(self, samples_path: Path, outcomes: list[Outcome]) -> None:
        """Every test sample's outcome at every evaluation of the snapshots taken (for the bootstrap)."""
        if outcomes:
            np.savez_compressed(samples_path, step=np.array([s.clock["step"] for s in self.taken]),
                                correct=np.stack([o["correct"] for o in outcomes]),
                                loss=np.stack([o["loss"] for o in outcomes]))

    def evaluated_in_training(self, samples_path: Path) -> dict[str, float]:
        """In training, once it ended: save the outcomes; what evaluating cost (as evaluate_all's)."""
        self.save_outcomes(samples_path, self.outcomes)
        self.taken, taken = [], self.taken
        self.discard()
        sharing = self.in_training.sharing if self.in_training else None
        return {"evaluations": len(taken), "evaluated_here": sharing.evaluated if sharing else len(taken), "eval_s": 0.0,
                "in_training_eval_s": self.in_training_s, "snapshot_s": sum(s.snapshot_s for s in taken)}

    def evaluating(self, machine: MachineEvaluation, log: StepLog, samples_path: Path,
                   keep_in: Path | None = None) -> Iterator[str]:
        """machine.run's actions; logs each evaluation in step order, deletes its snapshot (or moves it to keep_in)."""
        outcomes = []
        for item in machine.run(self.taken):
            if isinstance(item, str):
                yield item
                continue
            snapshot, record, outcome = item
            self._logged(snapshot, record, log, keep_in)
            outcomes.append(outcome)
        self.save_outcomes(samples_path, outcomes)
        self.discard()

    def evaluate_all(self, machine: MachineEvaluation, log: StepLog, samples_path: Path,
                     keep_in: Path | None = None) -> dict[str, float]:
        """`evaluating` to its end, pausing while it waits."""
        started = time.perf_counter()
        for action in self.evaluating(machine, log, samples_path, keep_in):
            if action == "waiting":
                time.sleep(POLL_S)
        return {"evaluations": len(self.taken), "evaluated_here": machine.evaluated,
                "eval_s": time.perf_counter() - started, "snapshot_s": sum(s.snapshot_s for s in self.taken)}

    def discard(self) -> None:
        """Delete what is left (after a failure, nothing is evaluated)."""
        for snapshot in self.taken + ([self.start] if self.start else []):
            snapshot.path.unlink(missing_ok=True)
        self.start = None
        if self.directory.exists() and not any(self.directory.iterdir()):
            self.directory.rmdir()
