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
from metrics.jsonl import read_jsonl

pytestmark = pytest.mark.timeout(300)

WIDTH = 90  # columns of the pseudo-terminal
STEPS = 20
# progress on (QUICK turns it off); worker 0 stalls 1.5 s at step 5, so the run is surely seen mid-way
SHORT_RUN = ["progress=true", f"max_steps={STEPS}", "fault.stall_peer=0", "fault.at_step=5", "fault.stall_s=1.5"]
FIGURES = re.compile(r"step (\d+)/(\d+), loss ([\d.]+), (\d+) samples/s, comm (\d+)%, ETA \d+:\d\d")


def expected_end(run_dir):
    """The last step's figures, from the run's own files: rank 0's step and loss, summary.json's throughput,
    and communication time / training time summed over the workers' steps.jsonl."""
    steps = [read_jsonl(path) for path in sorted(run_dir.glob("peer*/steps.jsonl"))]
    summary = json.loads((run_dir / "summary.json").read_text())
    comm = sum(s["comm_s"] for worker in steps for s in worker) / sum(worker[-1]["train_s"] for worker in steps)
    return {"step": steps[0][-1]["step"], "loss": f"{steps[0][-1]['loss']:.3f}",
            "samples_per_s": round(summary["throughput_samples_per_s"]), "comm_percent": 100 * comm}


def assert_shows(figures: re.Match, expected: dict) -> None:
    step, total, loss, rate, comm = figures.groups()
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
        assert lines and all(figures), result.stderr
        assert any(int(f[1]) < STEPS for f in figures)  # printed while the run went on, not only at its end
        job = json.loads((sweep / ".avgbench" / "sweep.json").read_text())["jobs"][number - 1]
        run_dir = sweep / next(o for o in job if o.startswith("hydra.sweep.subdir")).split("'")[1]
        assert_shows(figures[-1], expected_end(run_dir))


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
