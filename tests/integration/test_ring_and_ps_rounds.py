"""The stepwise ring round and the parameter server's exchange, run directly over real gloo processes
(integration tier; tests/unit/test_accounting.py runs the same code between threads in the unit tier).
Stepwise and ps knob validation is in the unit tier here."""
import multiprocessing
import time
import traceback
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from helpers import stepwise_rounds, toy_batch, toy_sgd, worker_tensor
from launchers.base import free_port
from metrics.recording.rundir import RunDir
from strategies.base import PeerContext
from strategies.ps import ShardClient, ShardServer, shard_of
from strategies.transport import GlooTransport


def _member(fn, rank: int, world_size: int, port: int, out: Path, args: tuple) -> None:
    try:
        ctx = PeerContext(rank, world_size, rank, world_size, "127.0.0.1", port, run=RunDir(out))
        transport = GlooTransport(ctx, timeout_s=30)
        try:
            torch.save(fn(transport, *args), out / f"{rank}.pt")
        finally:
            transport.close()
    except BaseException:
        (out / f"{rank}.err").write_text(traceback.format_exc())
        raise


def run_group(fn, world_size: int, out: Path, *args) -> list:
    """Run fn(transport, *args) in world_size processes over gloo on loopback; their results by rank."""
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    context = multiprocessing.get_context("spawn")  # fork after torch started its thread pools can deadlock
    procs = [context.Process(target=_member, args=(fn, r, world_size, port, out, args)) for r in range(world_size)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=90)
    for proc in procs:
        if proc.is_alive():
            proc.kill()
            proc.join()
    errors = [p.read_text() for p in sorted(out.glob("*.err"))]
    assert not errors and all(p.exitcode == 0 for p in procs), errors
    return [torch.load(out / f"{r}.pt", weights_only=False) for r in range(world_size)]


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_ring_round_gives_exact_prefix_means_and_full_mean_with_second_pass(tmp_path):
    n, chunks = 4, 3
    size = 444  # 3 x 37 floats
    outputs = run_group(stepwise_rounds, n, tmp_path, chunks)
    held_full = {rank: 0 for rank in range(n)}
    for rank, results in enumerate(outputs):
        for second_pass, ring, result in results:
            position = ring.index(rank)
            members = ring if second_pass else ring[:position + 1]
            expected = torch.stack([worker_tensor(r) for r in members]).sum(0) / len(members)
            assert result.position == position and result.count == len(members)
            torch.testing.assert_close(result.mean, expected, rtol=1e-6, atol=1e-6)
            if not second_pass:  # one pass: at most S each way
                assert result.bytes_sent == (size if position < n - 1 else 0)
                assert result.bytes_recv == (size if position > 0 else 0)
                held_full[rank] += result.count == n
            else:
                assert result.bytes_recv == size * (2 if 0 < position < n - 1 else 1)
    assert held_full == {rank: 1 for rank in range(n)}  # rotation: each worker once in n rounds
    for round_index in range(2 * n):  # the same bytes as an all-reduce would need, on average
        sent = sum(outputs[rank][round_index][2].bytes_sent for rank in range(n))
        assert sent == (n - 1) * size * (2 if round_index >= n else 1)


def _model() -> torch.nn.Module:
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def _ps_member(transport, workers: int, servers: int, steps: int):
    params = list(_model().parameters())
    server_ranks = list(range(workers, workers + servers))
    if transport.rank >= workers:
        shard = shard_of(params, servers, transport.rank - workers)
        stats = ShardServer(transport, shard, toy_sgd(shard), list(range(workers)), "sync").run()
        return {"updates": stats.updates, "pushes": stats.pushes}
    model = _model()
    client = ShardClient(transport, list(model.parameters()), server_ranks)
    client.pull_initial()
    for step in range(steps):
        model.zero_grad()
        x, y = toy_batch(step, transport.rank)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        client.push_pull(len(y), last=step == steps - 1)
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_sync_ps_equals_sgd_on_the_uniontoy_batch(tmp_path):
    workers, servers, steps = 3, 2, 4
    outputs = run_group(_ps_member, workers + servers, tmp_path, workers, servers, steps)
    reference = _model()
    optimizer = toy_sgd(reference.parameters())
    for step in range(steps):
        batches = [toy_batch(step, w) for w in range(workers)]
        x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(reference(x), y).backward()
        optimizer.step()
    for worker in range(workers):
        for got, want in zip(outputs[worker], reference.parameters()):
            torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=1e-6)
    for server in outputs[workers:]:
        assert server == {"updates": steps, "pushes": steps * workers}


def _resume_after_pause(transport, pause_s: float, out: Path):
    """An allreduce worker ends a pause of pause_s (rank 1) or none (rank 0); returns when it entered and left
    resume_together (wall clock, shared by the processes of this machine)."""
    import time

    from helpers import compose_config
    from strategies.allreduce import AllReduce

    cfg = compose_config("strategy=allreduce", "peers=2")
    ctx = PeerContext(transport.rank, 2, transport.rank, 2, "127.0.0.1", 0, run=RunDir(out))
    strategy = AllReduce(cfg, ctx, AllReduce.launch_spec(cfg))
    strategy.transport = transport
    if transport.rank == 1:
        time.sleep(pause_s)
    entered = time.time()
    strategy.resume_together([False])
    return entered, time.time()


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_an_allreduce_worker_resumes_only_when_the_other_ended_its_pause(tmp_path):
    """The training clock restarts after resume_together: a worker that returned from it early would count the other's
    pause (its evaluation) as the communication of its next step."""
    (entered0, left0), (entered1, left1) = run_group(_resume_after_pause, 2, tmp_path, 0.5, tmp_path)
    assert left0 >= entered1, "rank 0 resumed before rank 1 ended its pause"
    assert left1 - max(entered0, entered1) < 0.4, "the exchange itself took long once both were in it"


def _agree_to_stop(transport, reached_by_rank: list[list[bool]], out: Path):
    """A stepwise worker (states differ between full averages) at three pauses: whether it was told all reached."""
    from helpers import compose_config
    from strategies.stepwise import Stepwise

    cfg = compose_config("strategy=stepwise", "peers=2")
    ctx = PeerContext(transport.rank, 2, transport.rank, 2, "127.0.0.1", 0, run=RunDir(out))
    strategy = Stepwise(cfg, ctx, Stepwise.launch_spec(cfg))
    strategy.transport = transport
    return [strategy.resume_together([reached]) for reached in reached_by_rank[transport.rank]]


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_workers_whose_states_differ_stop_at_the_first_pause_where_every_one_reached_the_target(tmp_path):
    """Worker 0's curve confirms the crossing a pause before worker 1's: both train on to the pause where worker 1's
    does, since the run's time-to-target is the last worker's crossing (metrics/summary/target.py)."""
    reached = [[False, True, True], [False, False, True]]
    told = run_group(_agree_to_stop, 2, tmp_path, reached, tmp_path)
    assert told == [[[False], [False], [True]], [[False], [False], [True]]]


def _late_joiner(rank: int, port: int, out: Path) -> None:
    """Rank 1 joins 3 s late; then rank 0 all-reduces alone (as torch's own averagers do, on the process group),
    rank 1 waits for that to time out and leaves."""
    ctx = PeerContext(rank, 2, rank, 2, "127.0.0.1", port, run=RunDir(out))
    time.sleep(3.0 * rank)
    transport = GlooTransport(ctx, timeout_s=1, startup_s=30)
    if rank == 1:
        time.sleep(8)
        return
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4))
        (out / "0.txt").write_text("completed")
    except RuntimeError as exc:
        (out / "0.txt").write_text(f"{time.monotonic() - start:.2f} {exc}")
    transport.close()


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_peers_join_within_startup_s_and_then_each_collective_times_out_after_collective_s(tmp_path):
    port = free_port()
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_late_joiner, args=(r, port, tmp_path)) for r in range(2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=40)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]  # the late peer joined
    waited, message = (tmp_path / "0.txt").read_text().split(" ", 1)
    assert 0.9 <= float(waited) < 4 and "timed out" in message.lower(), message
