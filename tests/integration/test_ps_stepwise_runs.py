"""ps, stepwise and allreduce as real training runs (integration tier): bytes per step against hand
values, MPI, crashes. S = the tiny model's float32 parameters on digits, counted by hand (helpers)."""
import json
import subprocess
from pathlib import Path

import pytest

from helpers import (ROOT, TINY_DIGITS_BYTES, assert_no_leftovers, param_digests, run_train, steps_of, summary_of,
                     train_command)

pytestmark = pytest.mark.integration

PEERS = 4
S = TINY_DIGITS_BYTES  # 39912


def summaries(sweep_dir: Path) -> dict:
    found = {}
    for path in sweep_dir.rglob("summary.json"):
        summary = json.loads(path.read_text())
        found[summary["config"]["strategy"]["name"]] = summary
    return found


@pytest.mark.timeout(280)
def test_bytes_per_step_match_theory(tmp_path):
    command = train_command(tmp_path / "unused", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                            "strategy=ps,stepwise,allreduce", f"peers={PEERS}", "max_steps=8", "eval_every=0",
                            "report.baselines=off", "repeats=1")
    command.insert(2, "--multirun")  # one Hydra process runs the three jobs (and no baselines)
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=260, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    found = summaries(tmp_path / "sweep")
    assert set(found) == {"ps", "stepwise", "allreduce"}
    assert all(s["status"] == "completed" for s in found.values())

    ring = found["allreduce"]  # DDP's ring all-reduce: 2(N-1)/N x S = 1.5 S each way, every step
    assert ring["bytes_sent_per_step"] == ring["bytes_recv_per_step"] == 59868

    chain = found["stepwise"]  # one pass: S unless last (sent) / first (received); rotation: last 2 of 8 rounds
    assert chain["bytes_sent_per_step"] == pytest.approx(6 * S / 8)
    assert chain["bytes_recv_per_step"] == pytest.approx(6 * S / 8)
    for peer in chain["peers"]:
        assert peer["result"]["strategy"]["rounds"] == 8
        assert peer["result"]["strategy"]["rounds_with_full_average"] == 2

    ps = found["ps"]  # S up and S down, each with a 12-byte header (one server)
    assert ps["bytes_sent_per_step"] == S + 12 and ps["bytes_recv_per_step"] == S + 12
    server = next(p for p in ps["peers"] if p["result"]["role"] == "server")
    assert server["rank"] == PEERS and server["steps"] == 0
    figures = server["result"]["strategy"]
    assert figures["updates"] == 8 and figures["shard_bytes"] == S
    assert figures["bytes_recv"] == PEERS * 8 * (S + 12)
    assert figures["bytes_sent"] == PEERS * (8 + 1) * (S + 12)  # every update, and the initial parameters
    assert ps["total_samples"] == PEERS * 8 * 32 and ps["workers"] == PEERS
    for summary in found.values():
        assert summary["bytes_sent_per_sample"] == pytest.approx(summary["bytes_sent_per_step"] / 32)


@pytest.mark.timeout(200)
def test_async_ps_with_two_servers_over_mpi(run_dir):
    result = run_train(run_dir, "strategy=ps", "transport=mpi", "ps.mode=async",
                       "ps.servers=2", "peers=2", "max_steps=12")
    assert result.returncode == 0, result.stderr
    summary = summary_of(run_dir)
    servers = [p["result"]["strategy"] for p in summary["peers"] if p["result"]["role"] == "server"]
    assert len(servers) == 2
    for server in servers:  # every push applied on arrival, staleness recorded for each
        assert server["updates"] == server["pushes"] == 2 * 12
        assert sum(server["staleness_histogram"].values()) == 24 and server["staleness_max"] >= 0
    # size-balanced: the linear weight (5120 floats) alone | conv2 (4608) + the rest (250 floats)
    assert sorted(s["shard_bytes"] for s in servers) == [4 * 4858, 4 * 5120]
    steps = steps_of(run_dir, 0)
    assert len(steps) == 12 and all("staleness" in s for s in steps)
    assert all(s["bytes_sent"] == S + 2 * 12 and s["bytes_recv"] == S + 2 * 12 for s in steps)
    assert_no_leftovers(run_dir)


@pytest.mark.timeout(200)
def test_stepwise_second_pass_over_mpi_leaves_peers_identical(run_dir):
    result = run_train(run_dir, "strategy=stepwise", "transport=mpi", "stepwise.second_pass=true",
                       "peers=3", "max_steps=6")
    assert result.returncode == 0, result.stderr
    assert len(set(param_digests(run_dir, range(3)))) == 1
    # per round: the first worker sends 2S (its sum and the forwarded full sum), the others S each
    assert summary_of(run_dir)["bytes_sent_per_step"] == pytest.approx(4 * S / 3)
    assert_no_leftovers(run_dir)


@pytest.mark.timeout(200)
def test_raising_worker_under_ps_ends_run_with_its_rank(run_dir):
    # the other worker and the server, blocked in a receive, cannot take SIGTERM: the run ends after the shutdown
    # grace (timeouts.shutdown_s, 10 s by default), here 2 s
    result = run_train(run_dir, "strategy=ps", "peers=2", "max_steps=500", "fault.raise_peer=1", "fault.at_step=4",
                       "timeouts.shutdown_s=2")
    assert result.returncode == 1
    assert "rank 1" in result.stderr and "InjectedFault" in result.stderr
    summary = summary_of(run_dir)
    assert summary["status"] == "failed" and summary["failed_rank"] == 1
    assert_no_leftovers(run_dir)


@pytest.mark.timeout(200)
def test_killed_worker_under_mpirun_is_named(run_dir):
    result = run_train(run_dir, "strategy=ps", "transport=mpi", "peers=3", "max_steps=500",
                       "fault.kill_peer=2", "fault.at_step=4")
    assert result.returncode == 1
    assert "peer rank 2 was killed by SIGKILL" in result.stderr
    assert summary_of(run_dir)["failed_rank"] == 2
    assert_no_leftovers(run_dir)


@pytest.mark.timeout(200)
def test_stepwise_every_two_steps_without_rotation(run_dir):
    result = run_train(run_dir, "strategy=stepwise", "stepwise.every=2", "stepwise.average=grads",
                       "stepwise.rotate=false", "peers=2", "max_steps=6")
    assert result.returncode == 0, result.stderr
    for rank in range(2):
        steps = steps_of(run_dir, rank)
        local = [s for s in steps if s["step"] % 2]
        assert all(s["bytes_sent"] == s["bytes_recv"] == 0 and s["averaged_over"] == 0 for s in local)
        rounds = [s for s in steps if s["step"] % 2 == 0]
        assert [s["round"] for s in rounds] == [0, 1, 2]
        assert {s["averaged_over"] for s in rounds} == {rank + 1}  # no rotation: rank 1 always holds the full average
        # rank 0 always first (sends S, receives nothing), rank 1 always last
        assert {(s["bytes_sent"], s["bytes_recv"]) for s in rounds} == {(S, 0) if rank == 0 else (0, S)}
