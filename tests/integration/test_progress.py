"""Live progress: of real tiny runs, a bar on a terminal (a pseudo-terminal of a set width) and plain lines on a
pipe (integration tier); the figures from step records (unit tier)."""
import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios

import pytest

from helpers import QUICK, ROOT, train_command
from metrics.recording.jsonl import read_jsonl

pytestmark = pytest.mark.timeout(300)

WIDTH = 90  # columns of the pseudo-terminal
STEPS = 20
# progress on (QUICK turns it off); worker 0 stalls 1.5 s at step 5, so the run is surely seen mid-way
SHORT_RUN = ["progress=true", f"max_steps={STEPS}", "fault.stall_peer=0", "fault.at_step=5", "fault.stall_s=1.5"]
TRAINED = r"step (\d+)/(\d+), loss ([\d.]+), (\d+) samples/s, comm (\d+)%"
FIGURES = re.compile(TRAINED + r"(, ETA \d+:\d\d|, evaluated in \d+:\d\d|, stopped at the target)")  # at the end
EVALUATING = re.compile(r"evaluating snapshot (\d+) of (\d+)(, ETA \d+:\d\d)? \(" + TRAINED + r"\)")


def expected_end(run_dir):
    """The last step's figures, from the run's own files: rank 0's step and loss, summary.json's throughput,
    and communication time / training time summed over the workers' steps.jsonl."""
    steps = [read_jsonl(path) for path in sorted(run_dir.glob("peer*/steps.jsonl"))]
    summary = json.loads((run_dir / "summary.json").read_text())
    comm = sum(s["comm_s"] for worker in steps for s in worker) / sum(worker[-1]["train_s"] for worker in steps)
    return {"step": steps[0][-1]["step"], "loss": f"{steps[0][-1]['loss']:.3f}",
            "samples_per_s": round(summary["throughput_samples_per_s"]), "comm_percent": 100 * comm}


def assert_shows(figures: re.Match, expected: dict) -> None:
    step, total, loss, rate, comm, _ = figures.groups()
    assert (int(step), int(total), loss) == (expected["step"], STEPS, expected["loss"])
    assert abs(int(rate) - expected["samples_per_s"]) <= 1
    assert abs(int(comm) - expected["comm_percent"]) <= 1


def run_on_terminal(command: list[str]) -> tuple[int, list[str]]:
    """Run with stderr on a pseudo-terminal WIDTH columns wide; returns the exit code and every frame drawn."""
    master, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, WIDTH, 0, 0))
    proc = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=terminal)
    os.close(terminal)
    output = b""
    while True:
        if select.select([master], [], [], 1)[0]:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # EIO: the process and its children closed the terminal
                chunk = b""
            if not chunk:
                break
            output += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    frames = re.split(r"[\r\n]+", output.decode())
    return proc.wait(timeout=60), [f for f in frames if f]


@pytest.mark.integration
def test_terminal_shows_a_bar_that_fits_its_width(tmp_path):
    run_dir = tmp_path / "run"
    code, frames = run_on_terminal(train_command(run_dir, "strategy=allreduce", "peers=2", *SHORT_RUN))
    assert code == 0
    bars = [(frame, FIGURES.search(frame)) for frame in frames if frame.startswith("allreduce x2")]
    assert bars, frames
    assert all(len(frame) <= WIDTH for frame, _ in bars), max(bars, key=lambda b: len(b[0]))[0]
    assert any(figures and int(figures[1]) < STEPS for _, figures in bars)  # drawn while the run went on
    final, figures = bars[-1]
    assert figures and "|█" in final
    assert_shows(figures, expected_end(run_dir))


@pytest.mark.integration
def test_pipe_gets_plain_lines_with_the_job_in_the_sweep(tmp_path):
    sweep = tmp_path / "sweep"
    command = [sys.executable, str(ROOT / "train.py"), "-m", "seed=1,2", "repeats=1", f"hydra.sweep.dir={sweep}", *QUICK,
               *SHORT_RUN, "progress_interval_s=0.5", "eval_in_training=false"]  # its last line: the evaluation
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert "\r" not in result.stderr  # no bar drawing on a pipe
    for number in (1, 2):
        prefix = f"avgbench: job {number}/2 single x1: "
        lines = [line for line in result.stderr.splitlines() if line.startswith(prefix)]
        figures = [FIGURES.fullmatch(line.removeprefix(prefix)) for line in lines]
        assert lines and all(f or EVALUATING.fullmatch(line.removeprefix(prefix)) for f, line in zip(figures, lines))
        assert any(f and int(f[1]) < STEPS for f in figures)  # printed while the run went on, not only at its end
        assert figures[-1] and figures[-1][6].startswith(", evaluated in"), lines[-1]
        job = json.loads((sweep / ".avgbench" / "sweep.json").read_text())["jobs"][number - 1]
        run_dir = sweep / next(o for o in job if o.startswith("hydra.sweep.subdir")).split("'")[1]
        assert_shows(figures[-1], expected_end(run_dir))


@pytest.mark.integration
def test_after_training_the_line_counts_the_distinct_snapshots_being_evaluated(tmp_path):
    """Two allreduce workers save the same 21 states (every step of 20): the line counts 21 to evaluate, not 42."""
    command = train_command(tmp_path / "run", "strategy=allreduce", "peers=2", "progress=true", f"max_steps={STEPS}",
                            "eval_every=1", "precise_bn_samples=1024", "progress_interval_s=0.2",
                            "eval_in_training=false")
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    lines = [line.removeprefix("avgbench: allreduce x2: ") for line in result.stderr.splitlines()
             if line.startswith("avgbench: allreduce x2: ")]
    evaluating = [m for line in lines if (m := EVALUATING.fullmatch(line))]
    assert evaluating and all(int(m[2]) == STEPS + 1 and 1 <= int(m[1]) <= STEPS + 1 for m in evaluating), lines
    assert [int(m[1]) for m in evaluating] == sorted(int(m[1]) for m in evaluating)
    assert any(m[3] for m in evaluating)  # with an ETA once a snapshot was evaluated
    final = FIGURES.fullmatch(lines[-1])
    assert final and final[6].startswith(", evaluated in")
    assert_shows(final, expected_end(tmp_path / "run"))
