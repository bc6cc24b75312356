"""Per-peer training log: one JSON line per step (steps.jsonl) and per evaluation (eval.jsonl).

Times are seconds. `wall_s` counts from the start of training on this peer;
`train_s` is wall_s minus this peer's pauses to save weights for evaluation
(job/evaluation.py) and to time its speed reference (job/speed_reference.py). With network=emulated each line also has wire_tx_bytes /
wire_rx_bytes: bytes on this peer's own network interface from the first step on
(cumulative, headers and all traffic included).

Beside the time breakdown (job/loop.py), every step records what the peer process got from the CPUs
over the step's span (metrics/recording/machine.py: ProcessClock):
  cpu_s    CPU time of the peer process, all its threads (CLOCK_PROCESS_CPUTIME_ID)
  runq_s   run-queue delay of its threads: time they were ready to run but waited for a CPU
           (sum over /proc/self/task/*/schedstat field 2, ns -> s; null without schedstat)
A step whose thread computes alone on its core has cpu_s close to its wall time and runq_s near 0;
a step that waits for a peer has cpu_s well below its wall time.

Every noise_scale_every steps, allreduce (comm_hook=none) and single add grad_sq_local and grad_sq_global:
the squared norms of the peer's own gradient and of the gradient its update used (strategies/gradient_norms.py).
"""
from pathlib import Path

from metrics.recording.jsonl import JsonlWriter
from metrics.recording.rundir import PeerDir

STEP_FIELDS = (
    "step", "wall_s", "train_s", "samples", "loss",
    "data_s", "compute_s", "comm_s", "opt_s", "hidden_comm_s", "ended_at", "bytes_sent", "bytes_recv", "round",
    "cpu_s", "runq_s", "compute_wait_s",
)
PHASES = ("data_s", "compute_s", "comm_s", "opt_s")  # a step's time breakdown: the four sum to its wall time


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
