"""Live progress of a run's training, then of its snapshots' evaluation: a terminal bar, else a line per interval."""
import json
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from hydra.conf import HydraConf
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from job.evaluation import EvaluationState, evaluation_state
from launchers.hydra_internals import BASIC_SWEEPER
from metrics.recording.jsonl import JsonlTail
from metrics.recording.rundir import RunDir

if TYPE_CHECKING:
    from tqdm import tqdm as ProgressBar

BLOCK_SWEEPER = "hydra_plugins.avgbench_sweeper.BlockSweeper"


def sweep_size(hydra: HydraConf) -> int | None:
    """Jobs in this multirun: the block sweeper's plan, or the basic sweeper's product of sweep lengths, else None."""
    if hydra.sweeper.get("_target_") == BLOCK_SWEEPER:
        from launchers.sweeper import planned_jobs
        return planned_jobs(hydra.sweep.dir)
    if hydra.sweeper.get("_target_") != BASIC_SWEEPER:
        return None
    try:
        sweep = OmegaConf.load(Path(hydra.sweep.dir) / "multirun.yaml").hydra
        overrides = list(sweep.overrides.task) + [f"{k}={v}" for k, v in (sweep.sweeper.params or {}).items()]
        parsed = OverridesParser.create().parse_overrides(overrides)
        return math.prod(len(list(o.sweep_string_iterator())) if o.is_sweep_override() else 1 for o in parsed)
    except (OSError, HydraException):
        return None


def sweep_position() -> str:
    """'job k/n' in a Hydra multirun ('job k' when n is unknown), '' otherwise."""
    if not HydraConfig.initialized() or (hydra := HydraConfig.get()).mode != RunMode.MULTIRUN:
        return ""
    number, size = hydra.job.num + 1, sweep_size(hydra)
    return f"job {number}/{size}" if size and number <= size else f"job {number}"


def clock(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{seconds:02d}" if minutes >= 60 else f"{minutes}:{seconds:02d}"


STOPPED = ", stopped at the target"  # the last line of a run that stopped at its target (eval_in_training)


class Progress:
    def __init__(self, run_dir: Path, cfg: DictConfig, window: tuple[int, int] | None = None,
                 stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.enabled = bool(cfg.progress)
        self.interval_s = float(cfg.progress_interval_s)
        self.max_steps = cfg.max_steps
        self.run = RunDir(run_dir)
        self.title = " ".join(filter(None, [sweep_position(), f"{cfg.strategy.name} x{cfg.peers}"]))
        self.tails: dict[int, JsonlTail] = {}  # worker rank -> its steps.jsonl
        self.latest: dict[int, dict[str, Any]] = {}  # worker rank -> its last step record
        self.window = window  # (first, last) step measured, as the summary
        self.before_window: dict[int, dict[str, Any]] = {}  # worker rank -> its record of the step before the window
        self.in_window: dict[int, dict[str, Any]] = {}  # worker rank -> its latest record inside the window
        self.comm_s: dict[int, float] = {}  # worker rank -> its communication time so far
        self.next_line = time.monotonic() + self.interval_s
        self.last_line = ""
        self.bar: ProgressBar | None = None
        if self.enabled and self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=100, desc=self.title, file=self.stream, dynamic_ncols=True,
                            bar_format="{desc} |{bar}|")  # the bar last: a narrow terminal cuts it first

    def done(self, record: dict[str, Any]) -> float:
        """Share of the run a worker has done: what its strategy says (stops on its own), else step / max_steps."""
        return min(1.0, record["done"] if "done" in record else record["step"] / self.max_steps)

    def read(self) -> None:
        for peer in self.run.peers():
            if peer.rank not in self.tails and peer.steps.exists():
                self.tails[peer.rank] = JsonlTail(peer.steps)
        for rank, tail in self.tails.items():
            for record in tail.new_records():
                self.comm_s[rank] = self.comm_s.get(rank, 0.0) + record["comm_s"]
                self.latest[rank] = record
                if self.window and record["step"] == self.window[0] - 1:
                    self.before_window[rank] = record
                if self.window and self.window[0] <= record["step"] <= self.window[1]:
                    self.in_window[rank] = record

    def rate(self) -> float:
        """All workers' samples / longest training time, in the measurement window once all are in it (else so far)."""
        if self.window and set(self.in_window) == set(self.latest):
            start = {"samples": 0, "train_s": 0.0}
            spans = [(r["samples"] - self.before_window.get(rank, start)["samples"],
                      r["train_s"] - self.before_window.get(rank, start)["train_s"])
                     for rank, r in self.in_window.items()]
        else:
            spans = [(r["samples"], r["train_s"]) for r in self.latest.values()]
        return sum(samples for samples, _ in spans) / max(max(seconds for _, seconds in spans), 1e-9)

    def training(self) -> str:
        """Lowest-rank worker's step and loss; all workers' samples/s and communication share."""
        reference = self.latest[min(self.latest)]
        comm = sum(self.comm_s.values()) / max(sum(r["train_s"] for r in self.latest.values()), 1e-9)
        step = (f"step {reference['step']}/{self.max_steps}" if "done" not in reference
                else f"step {reference['step']} ({100 * self.done(reference):.0f}% done)")
        return f"{step}, loss {reference['loss']:.3f}, {self.rate():.0f} samples/s, comm {100 * comm:.0f}%"

    def figures(self) -> str:
        """The training figures and their ETA: the slowest worker's remaining share of the run at its pace so far."""
        slowest = min(self.latest.values(), key=self.done)
        eta = slowest["wall_s"] * (1 - self.done(slowest)) / max(self.done(slowest), 1e-9)
        return f"{self.training()}, ETA {clock(eta)}"

    def evaluation(self) -> EvaluationState | None:
        """The evaluation's state once every worker's training has ended (failed ones not waited for), else None."""
        state = evaluation_state(self.run.evaluation)
        failed = {peer.rank for peer in self.run.peers() if peer.error.exists()}
        return state if state.states and set(self.latest) <= state.ended | failed else None

    def stopped_at_target(self) -> bool:
        """Whether the run's workers ended where their evaluations in training confirmed the target."""
        results = [json.loads(peer.result.read_text()) for peer in self.run.peers() if peer.result.exists()]
        return bool(results) and all(r.get("stopped_at_target") for r in results)

    def line(self, state: EvaluationState | None, final: bool = False) -> str:
        """Training's figures (state None), then "evaluating snapshot k of n" and its ETA, then how long it took; a
        run that evaluated in training and stopped at its target says so at the end."""
        if final and state is None and self.stopped_at_target():
            return f"{self.training()}{STOPPED}"
        if state is None or state.since is None:  # since: set once a worker's training ended, as states are
            return self.figures()
        if state.evaluated == state.states and state.last_posted is not None:
            return f"{self.training()}, evaluated in {clock(state.last_posted - state.since)}"
        eta = (f", ETA {clock((time.time() - state.since) * (state.states - state.evaluated) / state.evaluated)}"
               if state.evaluated else "")
        return f"evaluating snapshot {state.evaluated + 1} of {state.states}{eta} ({self.training()})"

    def share_done(self, state: EvaluationState | None) -> float:
        """The bar: the lowest-rank worker's share of training, then the share of snapshot states evaluated."""
        return state.evaluated / state.states if state else self.done(self.latest[min(self.latest)])

    def update(self, final: bool = False) -> None:
        if not self.enabled:
            return
        self.read()
        if self.bar is not None:
            state = self.evaluation() if self.latest else None
            line = self.line(state, final) if self.latest else ""
            self.bar.set_description_str(f"{self.title}: {line}" if line else self.title, refresh=False)
            self.bar.n = (100 if line.endswith(STOPPED) else round(100 * self.share_done(state))) if line else 0
            self.bar.refresh()
        elif self.latest and (final or time.monotonic() >= self.next_line):
            line = f"avgbench: {self.title}: {self.line(self.evaluation(), final)}"
            if not (final and line == self.last_line):  # every interval, even when unchanged: still alive
                print(line, file=self.stream, flush=True)
            self.last_line = line
            self.next_line = time.monotonic() + self.interval_s

    def close(self) -> None:
        """The final state: the bar left in place on a terminal, otherwise one more line if anything changed."""
        self.update(final=True)
        if self.bar is not None:
            self.bar.close()
