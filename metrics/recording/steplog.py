"""A peer's steps.jsonl and eval.jsonl, one line a step or evaluation (fields: docs/runs.md, Files and Figures)."""
from pathlib import Path

from metrics.recording.jsonl import JsonlWriter
from metrics.recording.rundir import PeerDir

STEP_FIELDS = (
    "step", "wall_s", "train_s", "samples", "loss",
    "data_s", "compute_s", "comm_s", "opt_s", "wait_s", "hidden_comm_s", "ended_at", "bytes_sent", "bytes_recv",
    "round", "cpu_s", "runq_s", "compute_wait_s", "lost_to_sharing_s",
    "lost_after_gradient_s",
)
PHASES = ("data_s", "compute_s", "comm_s", "opt_s", "wait_s")  # a step's time breakdown, summing to its wall time
# (a run recorded before wait_s has none: read it as 0)


class StepLog:
    def __init__(self, peer_dir: Path):
        self.peer_dir = peer_dir
        self.steps = JsonlWriter(PeerDir(peer_dir).steps)
        self.evals = JsonlWriter(PeerDir(peer_dir).evals)

    def step(self, **record: object) -> None:
        self.steps.write(record)

    def eval(self, **record: object) -> None:
        self.evals.write(record)

    def close(self) -> None:
        self.steps.close()
        self.evals.close()
