"""ps, stepwise and allreduce as real training runs: bytes per step against theory, MPI, crashes."""
import json
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, assert_no_leftovers, run_train, train_command
from job.model import build_model
from metrics.jsonl import read_jsonl

PEERS = 4


def trainable_bytes() -> int:
    """S: bytes of the tiny model's trainable parameters (float32) on digits (10 classes, 1 channel)."""
    from omegaconf import OmegaConf

    model = build_model(OmegaConf.create({"model": {"name": "tiny"}}), 10, 1)
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def summaries(sweep_dir: Path) -> dict:
    found = {}
    for path in sweep_dir.glob("*/summary.json"):
        summary = json.loads(path.read_text())
        found[summary["config"]["strategy"]["name"]] = summary
    return found


def within(value: float, expected: float, tolerance: float = 0.02) -> bool:
    return abs(value - expected) <= tolerance * expected


@pytest.mark.timeout(280)
def test_bytes_per_step_match_theory(tmp_path):
    command = train_command(tmp_path / "unused", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                            "strategy=ps,stepwise,allreduce", f"peers={PEERS}", "max_steps=8", "eval_every=0")
    command.insert(2, "--multirun")  # one Hydra process runs the three jobs
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=260, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    found = summaries(tmp_path / "sweep")
    assert set(found) == {"ps", "stepwise", "allreduce"}
    assert all(s["status"] == "completed" for s in found.values())
    size = trainable_bytes()

    ring = found["allreduce"]
    assert within(ring["bytes_sent_per_step"], 2 * (PEERS - 1) / PEERS * size)
    assert within(ring["bytes_recv_per_step"], 2 * (PEERS - 1) / PEERS * size)

    chain = found["stepwise"]  # one pass: S unless last (sent) / first (received); rotation evens it out
    assert within(chain["bytes_sent_per_step"], (PEERS - 1) / PEERS * size)
    assert within(chain["bytes_recv_per_step"], (PEERS - 1) / PEERS * size)
    for peer in chain["peers"]:
        assert peer["result"]["strategy"]["rounds"] == 8
        assert peer["result"]["strategy"]["rounds_with_full_average"] == 2

    ps = found["ps"]  # S up, S down per worker; the server carries N·S each way
    assert within(ps["bytes_sent_per_step"], size) and within(ps["bytes_recv_per_step"], size)
    server = next(p for p in ps["peers"] if p["result"]["role"] == "server")
    assert server["rank"] == PEERS and server["steps"] == 0
    assert server["result"]["strategy"]["updates"] == 8
    assert within(server["result"]["strategy"]["bytes_recv"], PEERS * 8 * size)
    assert ps["total_samples"] == PEERS * 8 * 32


@pytest.mark.timeout(200)
def test_async_ps_with_two_servers_over_mpi(run_dir):
    result = run_train(run_dir, "strategy=ps", "transport=mpi", "ps.mode=async",
                       "ps.servers=2", "peers=2", "max_steps=12")
    assert result.returncode == 0, result.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    servers = [p["result"]["strategy"] for p in summary["peers"] if p["result"]["role"] == "server"]
    assert len(servers) == 2
    for server in servers:  # every push applied on arrival, staleness recorded for each
        assert server["updates"] == server["pushes"] == 2 * 12
        assert sum(server["staleness_histogram"].values()) == 24 and server["staleness_max"] >= 0
    assert sum(s["shard_bytes"] for s in servers) == trainable_bytes()
    steps = read_jsonl(run_dir / "peer0" / "steps.jsonl")
    assert len(steps) == 12 and all("staleness" in s for s in steps)
    assert_no_leftovers(run_dir)


@pytest.mark.timeout(200)
def test_stepwise_second_pass_over_mpi_leaves_peers_identical(run_dir):
    result = run_train(run_dir, "strategy=stepwise", "transport=mpi", "stepwise.second_pass=true",
                       "peers=3", "max_steps=6")
    assert result.returncode == 0, result.stderr
    digests = {json.loads((run_dir / f"peer{r}" / "result.json").read_text())["param_sha256"] for r in range(3)}
    assert len(digests) == 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert within(summary["bytes_sent_per_step"], 2 * 2 / 3 * trainable_bytes())
    assert_no_leftovers(run_dir)


@pytest.mark.timeout(200)
def test_raising_worker_under_ps_ends_run_with_its_rank(run_dir):
    result = run_train(run_dir, "strategy=ps", "peers=2", "max_steps=500", "fault.raise_peer=1", "fault.at_step=4")
    assert result.returncode == 1
    assert "rank 1" in result.stderr and "InjectedFault" in result.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["failed_rank"] == 1
    assert_no_leftovers(run_dir)


@pytest.mark.timeout(200)
def test_killed_worker_under_mpirun_is_named(run_dir):
    result = run_train(run_dir, "strategy=ps", "transport=mpi", "peers=3", "max_steps=500",
                       "fault.kill_peer=2", "fault.at_step=4")
    assert result.returncode == 1
    assert "peer rank 2 was killed by SIGKILL" in result.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["failed_rank"] == 2
    assert_no_leftovers(run_dir)


@pytest.mark.timeout(200)
def test_stepwise_every_two_steps_without_rotation(run_dir):
    result = run_train(run_dir, "strategy=stepwise", "stepwise.every=2", "stepwise.average=grads",
                       "stepwise.rotate=false", "peers=2", "max_steps=6")
    assert result.returncode == 0, result.stderr
    for rank in range(2):
        steps = read_jsonl(run_dir / f"peer{rank}" / "steps.jsonl")
        local = [s for s in steps if s["step"] % 2]
        assert all(s["bytes_sent"] == s["bytes_recv"] == 0 and s["averaged_over"] == 0 for s in local)
        rounds = [s for s in steps if s["step"] % 2 == 0]
        assert {s["averaged_over"] for s in rounds} == {rank + 1}  # no rotation: rank 1 always holds the full average
