"""Shapes that fit: the multi-peer strategies default to the most peers (2 to 4) whose CPUs fit the machine's
usable cores; an explicit peers wins; a run says where its peers came from, and when it oversubscribes.

Unit tier: composed configs with the core count injected. Integration: a short run's and a multirun's first
output line, its summary's shape, and the cores its peers pinned."""
import os
import socket
import subprocess
import sys

import pytest

from helpers import QUICK, ROOT, run_train, steps_of, summary_of


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_run_as_typed_fits_and_says_so_first(run_dir):
    cores = len(os.sched_getaffinity(0))
    expected = max(2, min(4, cores))
    result = run_train(run_dir, "strategy=stepwise", "max_steps=4", "eval_every=0")
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()[:2]
    assert first.startswith("avgbench: link: this machine's loopback"), first  # the link first (QUICK: loopback)
    assert second == (
        f"avgbench: peers={expected} (default: the most peers, 2 to 4, whose 1 CPU each fit this machine's "
        f"{cores} cores; ask for more with peers=N)")
    summary = summary_of(run_dir)
    assert summary["shape"] == {"peers": expected, "peer_cpus": 1, "processes": expected, "cpus_asked": expected,
                                "cores": cores, "oversubscription": expected / cores, "fits": expected <= cores,
                                "peers_default": True, "host": socket.gethostname(), "node_rank": 0, "nnodes": 1}
    pinned = [peer["result"]["cores"] for peer in summary["peers"]]
    assert len(pinned) == expected and all(len(c) == 1 for c in pinned)
    if expected <= cores:  # each peer on a core of its own
        assert len({c for cs in pinned for c in cs}) == expected
    for rank in range(expected):
        assert all(s["cpu_s"] > 0 and s["runq_s"] >= 0 for s in steps_of(run_dir, rank))


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_multirun_as_typed_says_its_shapes_first(tmp_path):
    """With -m the shape lines come before Hydra's own ("[HYDRA] Launching 2 jobs locally"), stdout and stderr
    together; a line that holds for some configurations only names them."""
    cores = len(os.sched_getaffinity(0))
    if cores != 2:
        pytest.skip(f"the expected lines are this 2-core machine's ({cores} cores here)")
    done = subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                           *QUICK, "strategy=stepwise,ps", "max_steps=2", "eval_every=0", "repeats=1",
                           "report.baselines=off", "sampler.enabled=false"],
                          cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=110,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:]
    assert done.stdout.splitlines()[:3] == [
        "avgbench: strategy=stepwise: peers=2 (default: the most peers, 2 to 4, whose 1 CPU each fit this "
        "machine's 2 cores; ask for more with peers=N)",
        "avgbench: strategy=ps: peers=2 (default: the most peers, 2 to 4, whose 1 CPU each fit this machine's "
        "2 cores beside the strategy's 1 other process; ask for more with peers=N)",
        "avgbench: strategy=ps: oversubscribed 1.5x: 3 processes ask 3 CPUs of this machine's 2 cores, so they "
        "share cores (the report's verdict says so)"], done.stdout[:3000]


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_an_explicit_shape_that_does_not_fit_says_by_how_much(run_dir):
    cores = len(os.sched_getaffinity(0))
    result = run_train(run_dir, "strategy=stepwise", "peers=2", f"peer_cpus={cores}", "max_steps=2", "eval_every=0")
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()[:2]
    assert first.startswith("avgbench: link: this machine's loopback"), first
    assert second == (
        f"avgbench: oversubscribed 2x: 2 processes ask {2 * cores} CPUs of this machine's {cores} cores, so they share "
        "cores (the report's verdict says so)")
    shape = summary_of(run_dir)["shape"]
    assert shape["oversubscription"] == 2 and shape["fits"] is False and shape["peers_default"] is False
