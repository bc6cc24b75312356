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
import time

import pytest

from helpers import QUICK, ROOT, train_command
from metrics.recording.jsonl import read_jsonl

pytestmark = pytest.mark.timeout(300)

WIDTH = 90  # columns of the pseudo-terminal
STEPS = 20
# progress on (QUICK turns it off); worker 0 stalls 1.5 s at step 5, so the run is surely seen mid-way
SHORT_RUN = ["progress=true", f"max_steps={STEPS}", "fault.stall_peer=0", "fault.at_step=5", "fault.stall_s=1.5"]
TRAINED = r"step (\d+)/(\d+), loss ([\d.]+), (\d+) samples/s, comm (\d+)%"
FIGURES = re.compile(TRAINED + r"(, ETA \d+:\d\d|, evaluated in \d+:\d\d)")  # training, then at the end
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
               *SHORT_RUN, "progress_interval_s=0.5"]
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
                            "eval_every=1", "precise_bn_samples=1024", "progress_interval_s=0.2")
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


# --- unit tier: the figures from step records ------------------------------------------------
def progress_over(tmp_path, records_by_rank: dict[int, list[dict]], max_steps: int = 100):
    from omegaconf import OmegaConf

    from launchers.progress import Progress

    for rank, records in records_by_rank.items():
        (tmp_path / f"peer{rank}").mkdir()
        (tmp_path / f"peer{rank}" / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    cfg = OmegaConf.create({"progress": True, "progress_interval_s": 10, "max_steps": max_steps,
                            "strategy": {"name": "hivemind"}, "peers": len(records_by_rank)})
    progress = Progress(tmp_path, cfg, stream=open(os.devnull, "w"))
    progress.read()
    return progress


def record(step: int, wall_s: float, **extra) -> dict:
    return {"step": step, "wall_s": wall_s, "train_s": wall_s, "samples": 32 * step, "loss": 1.0, "comm_s": 0.0,
            **extra}


def test_a_strategy_that_stops_on_its_own_shows_its_share_done_and_a_forward_eta(tmp_path):
    """hivemind stops on an epoch boundary, after more or fewer than max_steps steps: step 123 of max_steps=100
    with 80% of the epochs done is 80% done, and the ETA is the slowest worker's remaining share at its pace."""
    progress = progress_over(tmp_path, {0: [record(123, 100.0, done=0.8)], 1: [record(90, 99.0, done=0.75)]})
    figures = progress.figures()
    assert figures.startswith("step 123 (80% done), loss 1.000")
    assert figures.endswith("ETA 0:33")  # rank 1: 99 s for 75% -> 33 s for the remaining 25%


def test_other_strategies_count_steps_against_max_steps(tmp_path):
    progress = progress_over(tmp_path, {0: [record(25, 50.0)], 1: [record(20, 40.0)]})
    assert progress.figures().startswith("step 25/100,") and progress.figures().endswith("ETA 2:40")


# --- unit tier: the evaluation after training, from the hosts' boards -------------------------------
def board_of(tmp_path, ended: dict[int, list[str]], posted: list[str], since: float, last_posted: float):
    """Files of a host board: each worker's snapshot keys (published: its training ended) and the posted
    evaluations (job/evaluation.py HostBoard)."""
    board = tmp_path / ".avgbench" / "evaluation" / "host.node0"
    board.mkdir(parents=True)
    for rank, keys in ended.items():
        (board / f"snapshots{rank}.json").write_text(json.dumps({
            "rank": rank, "ended_at": since, "snapshots": [{"step": i, "key": k, "path": ""} for i, k in enumerate(keys)]}))
    for key in posted:
        (board / f"{key}.json").write_text(json.dumps({"posted_at": last_posted, "evaluated_by": 0}))


def test_once_training_has_ended_the_line_counts_the_distinct_snapshots_evaluated_and_their_eta(tmp_path):
    progress = progress_over(tmp_path, {0: [record(100, 50.0)], 1: [record(100, 50.0)]})
    now = time.time()
    # a synchronous strategy: both workers saved the same 5 states; 2 evaluated in the 20 s since training ended
    board_of(tmp_path, {0: list("abcde"), 1: list("abcde")}, posted=["a", "b"], since=now - 20, last_posted=now - 1)
    line = progress.line(progress.evaluation())
    assert line.startswith("evaluating snapshot 3 of 5, ETA 0:30 (step 100/100, loss 1.000")  # 3 left at 10 s each
    assert progress.share_done(progress.evaluation()) == pytest.approx(0.4)


def test_the_evaluation_shows_only_once_every_worker_has_ended_training(tmp_path):
    progress = progress_over(tmp_path, {0: [record(100, 50.0)], 1: [record(90, 50.0)]})
    board_of(tmp_path, {0: list("ab")}, posted=["a"], since=time.time() - 20, last_posted=time.time())
    assert progress.evaluation() is None and "ETA" in progress.line(None)  # worker 1 still trains
    (tmp_path / "peer1" / "error.txt").write_text("rank 1 failed")
    assert progress.evaluation() is not None  # a failed worker is not waited for


def test_at_the_end_the_line_says_how_long_evaluating_took(tmp_path):
    progress = progress_over(tmp_path, {0: [record(100, 50.0)]})
    board_of(tmp_path, {0: list("abc")}, posted=list("abc"), since=1000.0, last_posted=1075.0)
    assert progress.line(progress.evaluation()) == "step 100/100, loss 1.000, 64 samples/s, comm 0%, evaluated in 1:15"
