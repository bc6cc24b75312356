"""Per-peer training log: one JSON line per step (steps.jsonl) and per evaluation (eval.jsonl).

Times are seconds. `wall_s` counts from the start of training on this peer;
`train_s` is wall_s minus this peer's evaluation pauses. With network=emulated each
line also has wire_tx_bytes / wire_rx_bytes: bytes on this peer's own network
interface from the first step on (cumulative, headers and all traffic included).
"""
from pathlib import Path

from metrics.jsonl import JsonlWriter
from metrics.rundir import PeerDir

STEP_FIELDS = (
    "step", "wall_s", "train_s", "samples", "loss",
    "data_s", "compute_s", "comm_s", "opt_s", "hidden_comm_s", "ended_at", "bytes_sent", "bytes_recv", "round",
)


class StepLog:
    def __init__(self, peer_dir: Path):
        self.peer_dir = peer_dir
        self.steps = JsonlWriter(PeerDir(peer_dir).steps)
        self.evals = JsonlWriter(PeerDir(peer_dir).evals)

    def step(self, **record) -> None:
        self.steps.write(record)

    def eval(self, **record) -> None:
        self.evals.write(record)

    def close(self) -> None:
        self.steps.close()
        self.evals.close()
