"""The quick comparison as typed (`train.py -m experiment=quick`): wall clock, verdict, noise, sample report."""
import argparse
import shutil
import time
from datetime import date
from pathlib import Path

from bench.headline import ROOT, figures_of, keep_sample, run_sweep

COMMAND = ["experiment=quick", "strategy=allreduce,stepwise,ps"]  # README's quick comparison, as typed
GOAL_S = 600.0


def run(folder: str = "") -> dict:
    sweep = Path(folder) if folder else ROOT / "multirun" / f"quick-{date.today()}-{time.strftime('%H%M%S')}"
    if sweep.exists():
        shutil.rmtree(sweep)  # a resumed sweep would not time the command
    wall_s = run_sweep(sweep, "off", COMMAND)  # bench/run.py holds the machine lock
    return {
        "name": "quick",
        "ratio": wall_s / GOAL_S,
        "goal": f"a verdict in at most {GOAL_S / 60:.0f} min (the command's wall clock / {GOAL_S:.0f} s <= 1)",
        "goal_met": wall_s <= GOAL_S,
        "goal_s": GOAL_S,
        "command": "python train.py -m " + " ".join(COMMAND),
        "answer": figures_of(sweep, wall_s),
        "samples": keep_sample(sweep, "quick"),
        "sweeps": [{"path": str(sweep), "kept": False, "summary": "answer"}],  # the run folders stay out of the repository
        "setup": " ".join(COMMAND) + "; one sweep, alone",
    }


def add_arguments(group: argparse._ActionsContainer) -> None:
    group.add_argument("--quick-folder", dest="quick_folder", metavar="DIR",
                       help="the sweep's folder (default: multirun/quick-<date>-<time>; emptied first)")
