"""strategy=ring: Horovod's knobs and launch (unit tier); real Horovod under horovodrun, gloo and MPI
controllers, on the tiny model and digits (integration tier). Byte expectations use the tiny model's
parameters counted by hand (helpers.TINY_DIGITS_PARAMS = 9978)."""
import os
import sys

import pytest

from helpers import (TINY_DIGITS_BYTES, TINY_DIGITS_PARAMS, assert_no_leftovers, cli, leftover_processes,
                     param_digests, run_train, start_train, steps_of, summary_of, wait_for_steps)

FEW = ["strategy=ring", "eval_every=0"]


def train_identical_ranks(run_dir, peers: int, *overrides: str) -> None:
    """A short ring run that succeeds with the same parameters on every rank."""
    result = run_train(run_dir, *FEW, f"peers={peers}", *overrides)
    assert result.returncode == 0, result.stderr
    assert len(set(param_digests(run_dir, range(peers)))) == 1


def sent_per_step(run_dir, rank: int) -> list[int]:
    return [s["bytes_sent"] for s in steps_of(run_dir, rank)]


@pytest.mark.integration
@pytest.mark.timeout(150)
def test_gloo_two_peers_identical_params_exact_bytes_and_timeline(run_dir):
    train_identical_ranks(run_dir, 2, "max_steps=12", "ring.timeline=true")
    fp32_bytes = TINY_DIGITS_BYTES  # 2(N-1)/N x S = S for two peers: 39912
    for rank in (0, 1):
        assert sent_per_step(run_dir, rank) == [fp32_bytes] * 12
    steps = steps_of(run_dir, 0)
    assert all(s["bytes_recv"] == fp32_bytes for s in steps)
    assert all(s["comm_s"] >= 0 and s["compute_s"] > 0 and s["opt_s"] > 0 and s["link_s"] > 0 for s in steps)

    summary = summary_of(run_dir)
    assert summary["status"] == "completed" and summary["bytes_sent_per_step"] == fp32_bytes
    ring = summary["peers"][0]["result"]["strategy"]
    assert ring["controller"] == "gloo" and ring["collective_bytes"] == 12 * fp32_bytes  # counted, 12 steps
    assert ring["timeline"] == str(run_dir.resolve() / "horovod_timeline.json")
    assert "ALLREDUCE" in (run_dir / "horovod_timeline.json").read_text()
    cores = {tuple(p["result"]["cores"]) for p in summary["peers"]}  # our pinning, not MPI's binding
    assert len(cores) == min(2, len(os.sched_getaffinity(0)))
    assert_no_leftovers(run_dir)


@pytest.mark.integration
@pytest.mark.timeout(200)
def test_mpi_four_peers_fp16_halves_the_bytes(run_dir):
    train_identical_ranks(run_dir, 4, "max_steps=6", "ring.controller=mpi", "ring.compression=fp16")
    fp16_ring = 2 * 3 * 2 * TINY_DIGITS_PARAMS // 4  # 2(N-1)/N x 2 bytes x 9978 = 29934
    for rank in range(4):
        assert sent_per_step(run_dir, rank) == [fp16_ring] * 6
    ring = summary_of(run_dir)["peers"][3]["result"]["strategy"]
    assert (ring["controller"], ring["compression"]) == ("mpi", "fp16")
    assert ring["collective_bytes"] == 6 * 2 * TINY_DIGITS_PARAMS  # counted float16 tensors handed to Horovod
    assert_no_leftovers(run_dir)


@pytest.mark.integration
@pytest.mark.timeout(150)
def test_backward_passes_per_step_accumulates_locally(run_dir):
    train_identical_ranks(run_dir, 2, "max_steps=6", "ring.backward_passes_per_step=3")
    assert sent_per_step(run_dir, 1) == [0, 0, TINY_DIGITS_BYTES, 0, 0, TINY_DIGITS_BYTES]


@pytest.mark.integration
@pytest.mark.timeout(200)
@pytest.mark.parametrize("controller, peers", [("gloo", 3), ("mpi", 2)])
def test_killed_rank_is_named_and_nothing_is_left(run_dir, controller, peers):
    killed = peers - 1
    proc = start_train(run_dir, *FEW, f"peers={peers}", f"ring.controller={controller}", "max_steps=500",
                       f"fault.kill_peer={killed}", "fault.at_step=20")
    wait_for_steps(run_dir, 0, 1)
    workers = [p for p in leftover_processes(run_dir) if p.cmdline()[1:3] == ["-m", "job.worker"]]
    assert len(workers) == peers  # horovodrun handed the run's id to every rank: the final cleanup finds them
    _, stderr = proc.communicate(timeout=150)
    assert proc.returncode == 1
    assert f"peer rank {killed} was killed by SIGKILL" in stderr
    summary = summary_of(run_dir)
    assert summary["status"] == "failed" and summary["failed_rank"] == killed
    assert_no_leftovers(run_dir)


@pytest.mark.integration
def test_mpi_controller_without_mpirun_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))
    result = cli("strategy=ring", "ring.controller=mpi", f"hydra.run.dir={tmp_path}")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("avgbench: error: ring.controller=mpi needs Open MPI's mpirun")
    assert not list(tmp_path.glob("peer*"))


@pytest.mark.integration
def test_ring_knobs_need_strategy_ring():
    result = cli("ring.controller=mpi")
    assert result.returncode == 2 and "ring" in result.stderr


@pytest.mark.integration
@pytest.mark.timeout(150)
def test_stalled_rank_hits_the_collective_deadline(run_dir):
    result = run_train(run_dir, *FEW, "peers=2", "max_steps=500", "fault.stall_peer=1", "fault.at_step=4",
                       "fault.stall_s=600", "timeouts.collective_s=4")
    assert result.returncode == 1
    assert "Horovod all-reduce on rank 0 not done after 4 s" in result.stderr
    assert_no_leftovers(run_dir)
