"""strategy=hivemind. Unit tier: its knobs and run length. Integration tier: real hivemind peers on loopback
(tiny model, digits, small target batch sizes)."""
import json
import signal
import time
from pathlib import Path

import pytest
import torch

from helpers import (HIVE, assert_no_leftovers, compose_config, results, run_train, settled, start_train, summary_of,
                     wait_for_steps)
from job.model import build_model
from metrics.recording.jsonl import read_jsonl


def epoch_digests(run_dir: Path, rank: int) -> dict[int, str]:
    return {e["epoch"]: e["param_sha256"] for e in read_jsonl(run_dir / f"peer{rank}" / "hivemind_epochs.jsonl")}


def assert_own_files_removed(run_dir: Path, rank: int) -> None:
    files = json.loads((run_dir / f"peer{rank}" / "hivemind_files.json").read_text())
    assert not [s for s in files["sockets"] if Path(s).exists()]
    assert not [p for pid in files["pids"] for p in Path("/dev/shm").glob(f"torch_{pid}_*")]


@pytest.mark.integration
@pytest.mark.timeout(150)
def test_gradient_averaging_keeps_peers_identical_every_epoch(run_dir):
    result = run_train(run_dir, *HIVE, "peers=2", "max_steps=3", "hivemind.delay_state_averaging=false")
    assert result.returncode == 0, result.stderr
    digests = [epoch_digests(run_dir, r) for r in (0, 1)]
    assert set(digests[0]) >= {1, 2, 3}  # E = ceil(3 x 2 x 32 / 64)
    for epoch in set(digests[0]) & set(digests[1]):
        assert digests[0][epoch] == digests[1][epoch], f"peers differ after epoch {epoch}"
    peers = results(run_dir, (0, 1))
    assert peers[0]["param_sha256"] == peers[1]["param_sha256"]
    for peer in peers:
        figures = peer["strategy"]
        assert figures["final_epoch"] == figures["target_epoch"] == 3
        assert figures["log_averaged_gradients"] >= 2 and figures["allreduce_rounds_done"] >= 2
        # two equal owners: each sends the other half of the gradients, then the averaged half back = S per round
        assert figures["allreduce_bytes_sent"] == figures["allreduce_bytes_recv"] > 0
    steps = read_jsonl(run_dir / "peer0" / "steps.jsonl")
    assert {"hivemind_epoch", "samples_accumulated", "averaging_rounds_done", "averaging_s"} <= set(steps[-1])
    assert sum(s["bytes_sent"] for s in steps) > 0 and max(s["comm_s"] for s in steps) > 0
    # the global step inside an averaging step is the optimizer, as for every strategy (it was inside comm_s)
    averaged = [s for s in steps if s["round"] is not None]
    assert averaged and all(s["opt_s"] > 0 and s["link_s"] > 0 for s in averaged), averaged
    # link_s: this step's share of the cumulative all-reduce time, inside the step (the rounds are synchronous here);
    # the loop's hidden_comm_s is what of it lies beyond comm_s
    before = {s["step"]: s["averaging_s"] for s in steps} | {0: 0.0}
    for s in averaged:
        span = sum(s[k] for k in ("data_s", "compute_s", "opt_s", "comm_s", "wait_s"))
        assert s["link_s"] == pytest.approx(s["averaging_s"] - before[s["step"] - 1]) and s["link_s"] <= span, s
        assert s["hidden_comm_s"] == pytest.approx(max(0.0, s["link_s"] - s["comm_s"])), s
    summary = summary_of(run_dir)
    assert summary["status"] == "completed" and summary["lost_peers"] == []
    check_round_records(summary, peers)
    assert_no_leftovers(run_dir)
    for rank in (0, 1):
        assert_own_files_removed(run_dir, rank)


def check_round_records(summary: dict, peers: list[dict]) -> None:
    """One record per round, both peers in it; a gradient round moves S = the tiny model's gradient bytes per
    member each way (two equal owners: half out, the averaged half back); per-round bytes add up to each
    peer's counted total."""
    section = summary["averaging_rounds"]
    rounds = section["rounds"]
    assert rounds and all(r["group_size"] == r["members_recorded"] == 2 and r["success"] for r in rounds), rounds
    assert len({r["group_id"] for r in rounds}) == len(rounds)
    gradient_bytes = 4 * sum(p.numel() for p in build_model(compose_config("model=tiny"), 10, 1).parameters())
    gradients = [r for r in rounds if r["kind"] == "gradients"]
    assert len(gradients) >= 2 and {r["epoch"] for r in gradients} <= {0, 1, 2}, gradients
    # a reply still streaming when a member's own round ended counts in its totals, not in the round: <= 1 %
    assert all(0.99 * 2 * gradient_bytes <= r["bytes_sent"] <= 2 * gradient_bytes for r in gradients), gradients
    assert all(r["bytes_recv"] == 2 * gradient_bytes for r in gradients), gradients
    assert section["group_sizes"]["gradients"] == {"2": len(gradients)} and section["whole_swarm_share"]["gradients"] == 1
    counted = sum(p["strategy"]["allreduce_bytes_sent"] for p in peers)
    assert 0.99 * counted <= sum(r["bytes_sent"] for r in rounds) <= counted
    # 3 epochs of 64 samples were trained into the final model; the swarm wait is not training time
    assert summary["useful_samples"] == 3 * 64 and summary["startup_wait_s"] is not None


@pytest.mark.integration
@pytest.mark.timeout(150)
def test_local_updates_end_identical(run_dir):
    result = run_train(run_dir, *HIVE, "peers=2", "max_steps=4", "hivemind.use_local_updates=true")
    assert result.returncode == 0, result.stderr
    peers = results(run_dir, (0, 1))
    # state averaging hands back the parts a peer does not own as local + (average - local): equal up to rounding
    final = [read_jsonl(run_dir / f"peer{r}" / "hivemind_epochs.jsonl")[-1] for r in (0, 1)]
    assert abs(final[0]["param_sum"] - final[1]["param_sum"]) <= 1e-6 * final[0]["param_abs_sum"]
    assert all(p["strategy"]["final_epoch"] >= 4 and p["strategy"]["allreduce_rounds_done"] >= 2 for p in peers)
    # the stop (final synchronous state round, recorded last in hivemind_epochs.jsonl) lies inside the last
    # logged step, so throughput and exposed communication count it: the step line is written after it
    for rank in (0, 1):
        peer = run_dir / f"peer{rank}"
        last_round_at = read_jsonl(peer / "hivemind_epochs.jsonl")[-1]["time"]
        assert last_round_at <= (peer / "steps.jsonl").stat().st_mtime + 0.05, rank  # mtime: jiffy resolution
        assert read_jsonl(peer / "steps.jsonl")[-1]["round"] is not None  # its bytes belong to an epoch
    assert_no_leftovers(run_dir)


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_ctrl_c_ends_every_process(run_dir):
    # what does not end on SIGTERM is killed after the shutdown grace (timeouts.shutdown_s, 10 s by default; it was
    # sat through here), 2 s
    proc = start_train(run_dir, *HIVE, "peers=2", "max_steps=100000", "timeouts.shutdown_s=2")
    wait_for_steps(run_dir, 0, 3, timeout=90)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    assert proc.returncode == 130
    assert_no_leftovers(run_dir)


@pytest.mark.integration
@pytest.mark.timeout(200)
def test_second_launch_joins_through_initial_peers(tmp_path):
    """Two launches, as on two hosts: the second joins the first's DHT with hivemind.initial_peers."""
    hosts = ["peers=2", "launch.nnodes=2", "launch.master_port=29999", "max_steps=3"]
    first = start_train(tmp_path / "a", *HIVE, *hosts, "launch.node_rank=0")
    maddrs = tmp_path / "a" / ".avgbench" / "hivemind_maddrs"
    deadline = time.monotonic() + 90
    while not maddrs.exists():
        assert time.monotonic() < deadline and first.poll() is None, "first launch did not publish its address"
        time.sleep(0.2)
    joined = f"hivemind.initial_peers=[{','.join(maddrs.read_text().split())}]"
    second = run_train(tmp_path / "b", *HIVE, *hosts, "launch.node_rank=1", joined)
    assert second.returncode == 0, second.stderr
    first.communicate(timeout=120)
    assert first.returncode == 0
    digests = [json.loads((tmp_path / d / f"peer{r}" / "result.json").read_text())["param_sha256"]
               for d, r in (("a", 0), ("b", 1))]
    assert digests[0] == digests[1]


@pytest.mark.integration
@pytest.mark.timeout(90)
def test_no_peers_found_is_a_clear_error(run_dir):
    """Only rank 0 of two is launched here: it must give up after timeouts.startup_s, not hang."""
    result = run_train(run_dir, *HIVE, "peers=2", "launch.nnodes=2", "launch.master_port=29999",
                       "launch.node_rank=0", "timeouts.startup_s=5", "max_steps=3")
    assert result.returncode == 1
    assert "only ranks [0] of 2 are ready" in result.stderr and "no peers found" in result.stderr
    assert_no_leftovers(run_dir)


@pytest.mark.integration
@pytest.mark.timeout(90)
def test_daemon_that_cannot_start_is_reported(run_dir):
    result = run_train(run_dir, *HIVE, "peers=1", "hivemind.host=192.0.2.1", "max_steps=3")  # not ours to bind
    assert result.returncode == 1
    assert "failed to start on ['/ip4/192.0.2.1/tcp/0']" in result.stderr
    assert "Daemon failed to start" in result.stderr  # hivemind's message with p2pd's own last line
    assert_no_leftovers(run_dir)


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_state_for_late_peers_is_a_clone_taken_under_the_optimizer_lock():
    """Guard against live tensors handed to late peers (segfaults with use_local_updates=True)."""
    import threading

    import hivemind

    from strategies.hivemind_internals import cloning_state_averager_class

    dht = hivemind.DHT(start=True, host_maddrs=["/ip4/127.0.0.1/tcp/0"], nat_port_map=False)
    params = [torch.nn.Parameter(torch.ones(4))]
    averager = cloning_state_averager_class()(dht=dht, prefix="guard", optimizer=torch.optim.SGD, params=params,
                                        offload_optimizer=False, start=True)
    try:
        _, tensors, _ = averager.get_current_state()
        live = [p for group in averager.optimizer.param_groups for p in group["params"]]
        assert tensors[0].data_ptr() != live[0].data_ptr() and torch.equal(tensors[0], live[0])
        got = []
        with averager.lock_optimizer:  # the optimizer is "stepping": the state must wait for it
            reader = threading.Thread(target=lambda: got.append(averager.get_current_state()))
            reader.start()
            reader.join(0.5)
            assert reader.is_alive() and not got
        reader.join(10)
        assert got
    finally:
        averager.shutdown()
        dht.shutdown()
        signal.signal(signal.SIGINT, signal.default_int_handler)  # hivemind leaves it ignored in this process


@pytest.mark.integration
@pytest.mark.timeout(90)
def test_dht_bootstrap_waits_out_a_peer_too_busy_to_answer_its_ping():
    """16 peers starting on 2 cores: rank 0's DHT answered a bootstrap ping after hivemind's 3 s, and rank 9 failed."""
    import os
    import threading

    import hivemind
    import psutil

    from strategies.hivemind import start_dht

    def p2pds():
        return {p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == "p2pd"}

    before = p2pds()
    first = hivemind.DHT(start=True, host_maddrs=["/ip4/127.0.0.1/tcp/0"], nat_port_map=False)
    joined, resume = None, threading.Timer(5.0, os.kill, (first.pid, signal.SIGCONT))
    try:
        maddrs = [str(m) for m in first.get_visible_maddrs()]
        os.kill(first.pid, signal.SIGSTOP)  # its p2pd accepts the ping, the DHT does not answer it
        resume.start()
        started = time.monotonic()
        joined = start_dht(hivemind, 60.0, host_maddrs=["/ip4/127.0.0.1/tcp/0"], initial_peers=maddrs,
                           nat_port_map=False)
        assert time.monotonic() - started >= 5.0  # it did wait for the answer
        assert joined.get_visible_maddrs()
    finally:
        resume.cancel()
        os.kill(first.pid, signal.SIGCONT)
        for dht in (joined, first):
            if dht is not None:
                dht.shutdown()
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # the daemons of shut-down DHTs exit within moments; a leaked one never does
    assert not settled(lambda: p2pds() - before, 15)  # the attempts that failed left no daemon behind
