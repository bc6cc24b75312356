"""What a run records about the CPUs: per step, the peer process's CPU time and run-queue delay
(metrics.recording.machine.ProcessClock); per run, the machine around it (MachineSampler, summary.json `machine`).

Each figure is checked against an independent clock or process: a sleeping step uses no CPU; a busy
step was either on a CPU or waiting for one for its whole wall time; a busy process outside the run shows
up as other processes' CPU, one the launcher reaped as the run's own."""
import shlex
import subprocess
import sys
import time

import psutil
import pytest

from helpers import ROOT, run_train, steps_of, summary_of
from metrics.recording.jsonl import read_jsonl
from metrics.recording.steplog import PHASES
from metrics.recording.machine import MachineSampler
from metrics.summary.machine import machine_section

BUSY = "import time\nend = time.monotonic() + float(__import__('sys').argv[1])\nwhile time.monotonic() < end: pass"


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_machine_sampler_splits_the_runs_cpu_from_the_others(tmp_path):
    cores = len(psutil.Process().cpu_affinity())
    reaped_before = reaped_cpu_s()
    sampler = MachineSampler(tmp_path / "machine.jsonl", interval=0.2)
    sampler.start()
    ours = subprocess.Popen([sys.executable, "-c", BUSY, "1.0"])  # reaped below: the run's own
    other = subprocess.Popen([sys.executable, "-c", BUSY, "30"])  # still running at the end: another process
    ours.wait()
    time.sleep(0.5)
    ours_cpu = reaped_cpu_s() - reaped_before
    other_cpu = sum(psutil.Process(other.pid).cpu_times()[:2])
    sampler.stop()
    other.kill()
    other.wait()
    section = machine_section(tmp_path / "machine.jsonl", cores, lock=None)
    assert section["samples"] >= 5 and section["sampled_s"] > 1.0
    wall = section["sampled_s"]
    assert section["other_cpu_share"] * cores * wall >= 0.9 * other_cpu  # the outside process is someone else's
    samples = read_jsonl(tmp_path / "machine.jsonl")
    run_cpu = samples[-1]["run_cpu_s"] - samples[0]["run_cpu_s"]
    # the reaped child is the run's own; it spun beside the other busy process for most of the other's life
    assert run_cpu >= 0.9 * ours_cpu > 0.3 * other_cpu
    assert section["alone"] is False  # a whole busy process beside it
    for share in ("cpu_pressure_share", "steal_share"):
        assert section[share] is None or 0 <= section[share] <= 1
    assert section["load_max"] >= section["load_mean"] > 0


ORPHAN = """
import subprocess, sys, time
import psutil
from job.process import adopt_orphans, reap_orphans
from metrics.recording.machine import own_cpu_s
if sys.argv[1] == "adopt":
    adopt_orphans()
before = own_cpu_s()
subprocess.run(["sh", "-c", sys.argv[2] + " &"], check=True)  # sh ends before the busy process it started
def running_children():
    return [c for c in psutil.Process().children() if c.status() != psutil.STATUS_ZOMBIE]
deadline = time.monotonic() + 20  # until every child (the adopted orphan) has ended
while running_children() and time.monotonic() < deadline:
    time.sleep(0.05)
reap_orphans()
print(own_cpu_s() - before)
"""
SPIN_CPU = ("import time\nend = time.process_time() + float(__import__('sys').argv[1])\n"
            "while time.process_time() < end: pass")


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_daemon_whose_parent_ended_first_counts_as_the_runs_cpu():
    """Open MPI's daemons outlive mpirun: the launcher adopts them, so their CPU is the run's, not other work's."""
    def child_cpu(mode: str) -> float:
        busy = shlex.join([sys.executable, "-c", SPIN_CPU, "1.0"])
        done = subprocess.run([sys.executable, "-c", ORPHAN, mode, busy], capture_output=True, text=True,
                              timeout=30, cwd=ROOT)
        assert done.returncode == 0, done.stderr
        return float(done.stdout)

    assert child_cpu("adopt") >= 0.95  # the orphan spun 1.0 s of CPU
    assert child_cpu("init") < 0.5    # without adopting, init reaps it and its CPU is lost to the run


SESSIONS = """
import os, subprocess, sys, time
import psutil
from job.process import adopt_orphans, own_children, reap_orphans
adopt_orphans()
helper = subprocess.Popen(["sh", "-c", "exit 5"])  # a child started before the peers, as the link's helpers are
helpers = own_children()
peer = subprocess.Popen(["sh", "-c", "sleep 0.3 & exit 3"], start_new_session=True)  # leaves its sleep at once
own = helpers | {peer.pid}  # as the launcher lists them
deadline = time.monotonic() + 10
def ended():
    return {c.pid for c in psutil.Process().children() if c.status() == psutil.STATUS_ZOMBIE}
while len(ended()) < 3 and time.monotonic() < deadline:  # the peer, the helper and the orphaned sleep
    time.sleep(0.05)
orphans = ended() - {peer.pid, helper.pid}
reap_orphans(keep=own)
print(len(orphans), sorted(orphans & ended()), peer.poll(), helper.poll())
"""


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_reaping_orphans_leaves_our_own_childrens_exit_codes():
    done = subprocess.run([sys.executable, "-c", SESSIONS], capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "[]", "3", "5"]  # the orphan reaped; our children's exit codes kept


def reaped_cpu_s() -> float:
    times = psutil.Process().cpu_times()
    return times.children_user + times.children_system


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_every_step_and_the_summary_record_the_cpus(run_dir):
    result = run_train(run_dir, "strategy=stepwise", "peers=2", "max_steps=6", "eval_every=0")
    assert result.returncode == 0, result.stderr
    summary = summary_of(run_dir)
    for rank in (0, 1):
        steps = steps_of(run_dir, rank)
        walls = [sum(s[p] for p in PHASES) for s in steps]
        threads = max(r["threads"] for r in read_jsonl(run_dir / f"peer{rank}" / "resources.jsonl"))
        for step, wall in zip(steps, walls):
            assert 0 < step["cpu_s"] <= threads * wall + 0.01
            assert step["runq_s"] >= 0
        peer = summary["peers"][rank]
        assert peer["cpu_s_per_step"] == pytest.approx(sum(s["cpu_s"] for s in steps) / len(steps))
        assert peer["wall_s_per_step"] == pytest.approx(sum(walls) / len(walls))
        assert peer["runq_s_per_step"] >= 0
    machine = summary["machine"]
    assert set(machine) >= {"cores", "cpu_pressure_share", "steal_share", "load_mean", "load_max",
                            "other_cpu_share", "alone", "lock"}
    assert machine["sampled_s"] >= summary["wall_s"] - 1
    assert machine["lock"]["under_lock"] is False and machine["lock"]["mode"] == "wait"
    assert summary["shape"]["peers_default"] is False
    assert {"cpu_s", "runq_s", "machine", "shape"} <= set(summary["methods"])
