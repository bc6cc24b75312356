"""Byte accounting and the averaging algorithms' arithmetic, in one process (unit tier).

The stepwise ring round and the parameter server's exchange run here over an in-memory
transport between threads (no process, no socket); tests/integration/test_ring_and_ps_rounds.py runs
the same code over real gloo processes. Expected bytes are hand values.
"""
import threading
import time

import pytest
import torch

from helpers import stepwise_rounds, toy_batch, toy_sgd, worker_tensor

from strategies.ps import PULL_HEADER, PUSH_HEADER, ShardClient, ShardServer, partition, shard_of
from strategies.stepwise import ring_order
from strategies.transport import Pending, Transport, ring_allreduce_bytes

pytestmark = pytest.mark.timeout(60)


# --- an in-memory transport between threads ---------------------------------------------------
class Wire:
    """Messages in flight between the ranks of one group (FIFO per sender, receiver and tag)."""

    def __init__(self):
        self.messages: list[tuple[int, int, int, torch.Tensor]] = []  # (src, dst, tag, tensor)
        self.changed = threading.Condition()

    def put(self, src, dst, tag, tensor):
        with self.changed:
            self.messages.append((src, dst, tag, tensor.detach().clone()))
            self.changed.notify_all()

    def take(self, dst, tag, src=None, timeout_s=10.0) -> tuple[int, torch.Tensor]:
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while True:
                for i, (s, d, t, tensor) in enumerate(self.messages):
                    if d == dst and t == tag and (src is None or s == src):
                        del self.messages[i]
                        return s, tensor
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"rank {dst}: no message with tag {tag} from {src}")
                self.changed.wait(left)


class Done(Pending):
    def wait(self) -> None:
        pass


class Receive(Pending):
    def __init__(self, wire, dst, src, tag, into):
        self.wire, self.dst, self.src, self.tag, self.into = wire, dst, src, tag, into

    def wait(self) -> None:
        _, tensor = self.wire.take(self.dst, self.tag, self.src)
        assert tensor.numel() == self.into.numel(), "message and receive buffer differ in size"
        self.into.copy_(tensor.view_as(self.into))


class ThreadTransport(Transport):
    def __init__(self, wire: Wire, rank: int, world_size: int):
        self.wire, self.rank, self.world_size = wire, rank, world_size

    def isend(self, tensor, dst, tag=0):
        self.wire.put(self.rank, dst, tag, tensor)
        return Done()

    def irecv(self, tensor, src, tag=0):
        return Receive(self.wire, self.rank, src, tag, tensor)

    def recv_any(self, tensor, tag=0, timeout_s=None):
        src, message = self.wire.take(self.rank, tag, timeout_s=timeout_s or 10.0)
        tensor.copy_(message.view_as(tensor))
        return src

    def allreduce_sum(self, tensor):
        raise NotImplementedError

    def broadcast(self, tensor, src):
        raise NotImplementedError

    def barrier(self):
        raise NotImplementedError


def run_threads(fn, world_size: int, *args) -> list:
    """fn(transport, *args) on world_size threads; their results by rank."""
    wire = Wire()
    outputs, errors = [None] * world_size, []

    def member(rank):
        try:
            outputs[rank] = fn(ThreadTransport(wire, rank, world_size), *args)
        except BaseException as exc:
            errors.append((rank, exc))

    threads = [threading.Thread(target=member, args=(r,), daemon=True) for r in range(world_size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors and not any(t.is_alive() for t in threads), errors
    assert not wire.messages, "messages sent but never received"
    return outputs


# --- ring all-reduce payload ------------------------------------------------------------------
@pytest.mark.parametrize("size, peers, expected", [
    (1000, 1, 0),       # alone: nothing to send
    (1000, 2, 1000),    # 2 steps of S/2
    (1000, 4, 1500),    # 6 steps of S/4
    (1200, 3, 1600),    # 4 steps of S/3
    (39912, 4, 59868),  # the tiny model's float32 gradients
])
def test_ring_allreduce_bytes(size, peers, expected):
    assert ring_allreduce_bytes(size, peers) == expected


# --- stepwise --------------------------------------------------------------------------------
def test_rotation_makes_every_worker_last_once_in_n_rounds():
    assert ring_order(4, 0, rotate=True) == [0, 1, 2, 3]
    assert ring_order(4, 1, rotate=True) == [1, 2, 3, 0]
    assert ring_order(4, 6, rotate=True) == [2, 3, 0, 1]
    for n in (1, 2, 4, 5):
        rings = [ring_order(n, r, rotate=True) for r in range(n)]
        assert sorted(ring[-1] for ring in rings) == list(range(n))
    assert {ring_order(4, r, rotate=False)[-1] for r in range(8)} == {3}  # without rotation: always rank 3


@pytest.mark.parametrize("chunks", [1, 3, 200])  # 200 > 111 elements: one element per piece
def test_ring_round_means_and_bytes(chunks):
    n, size = 4, 444
    outputs = run_threads(stepwise_rounds, n, chunks)
    held_full = dict.fromkeys(range(n), 0)
    for rank, results in enumerate(outputs):
        for second_pass, ring, result in results:
            position = ring.index(rank)
            members = ring if second_pass else ring[:position + 1]
            expected = torch.stack([worker_tensor(r) for r in members]).sum(0) / len(members)
            assert (result.position, result.count) == (position, len(members))
            torch.testing.assert_close(result.mean, expected, rtol=1e-6, atol=1e-6)
            if not second_pass:  # S to the next worker unless last, S from the previous unless first
                assert result.bytes_sent == (444 if position < 3 else 0)
                assert result.bytes_recv == (444 if position > 0 else 0)
                held_full[rank] += result.count == n
            else:  # the broadcast pass: every worker but the last receives the full sum too
                assert result.bytes_sent == {0: 888, 1: 888, 2: 444, 3: 444}[position]
                assert result.bytes_recv == {0: 444, 1: 888, 2: 888, 3: 444}[position]
    assert held_full == dict.fromkeys(range(n), 1)  # rotation: each worker holds the full mean once in n rounds
    for round_index in range(2 * n):
        sent = sum(outputs[rank][round_index][2].bytes_sent for rank in range(n))
        assert sent == (3 * size if round_index < n else 6 * size)


def test_second_pass_of_two_workers_sends_the_vector_once_each_way():
    """N = 2: the first worker sends its vector, the last sends the full sum back; no one forwards (P = S, not 2S)."""
    outputs = run_threads(stepwise_rounds, 2, 4)
    for results in outputs:
        for second_pass, _, result in results:
            if second_pass:
                assert (result.bytes_sent, result.bytes_recv, result.count) == (444, 444, 2)


# --- parameter server ---------------------------------------------------------------------------
def test_partition_is_size_balanced_and_complete():
    sizes = [100, 10, 60, 50, 40, 7, 3]
    assert partition(sizes, 3) == [[0], [1, 2, 5, 6], [3, 4]]  # largest first onto the lightest: 100 | 80 | 90
    assert partition([5], 2) == [[0], []]
    assert partition([4, 4, 4, 4], 2) == [[0, 2], [1, 3]]


SEEDING = threading.Lock()  # the global RNG is shared by the threads


def _model() -> torch.nn.Module:
    # parameters: 6x16 weight (96), 16 bias, 16x3 weight (48), 3 bias: 163 floats, 652 bytes
    with SEEDING:
        torch.manual_seed(7)
        return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def test_shards_of_the_model():
    params = list(_model().parameters())
    # sizes [96, 16, 48, 3] over 2 servers: 96 | 48 + 16 + 3
    assert [p.numel() for p in shard_of(params, 2, 0)] == [96]
    assert [p.numel() for p in shard_of(params, 2, 1)] == [16, 48, 3]
    assert [p.numel() for p in shard_of(params, 1, 0)] == [96, 16, 48, 3]




def _ps_member(transport, workers: int, servers: int, steps: int):
    params = list(_model().parameters())
    if transport.rank >= workers:
        shard = shard_of(params, servers, transport.rank - workers)
        stats = ShardServer(transport, shard, toy_sgd(shard), list(range(workers)), "sync").run()
        return stats
    model = _model()
    client = ShardClient(transport, list(model.parameters()), list(range(workers, workers + servers)))
    client.pull_initial()
    exchanged = []
    for step in range(steps):
        model.zero_grad()
        x, y = toy_batch(step, transport.rank)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        started = time.perf_counter()
        exchange = client.push_pull(len(y), last=step == steps - 1)
        exchanged.append((exchange, time.perf_counter() - started))
    return [p.detach().clone() for p in model.parameters()], exchanged


def test_sync_ps_is_sgd_on_the_union_batch_with_exact_bytes():
    workers, servers, steps = 3, 2, 4
    outputs = run_threads(_ps_member, workers + servers, workers, servers, steps)
    reference = _model()
    optimizer = toy_sgd(reference.parameters())
    for step in range(steps):
        batches = [toy_batch(step, w) for w in range(workers)]
        optimizer.zero_grad()
        x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
        torch.nn.functional.cross_entropy(reference(x), y).backward()
        optimizer.step()
    assert (PUSH_HEADER, PULL_HEADER) == (3, 3)
    for worker in range(workers):
        params, exchanged = outputs[worker]
        for got, want in zip(params, reference.parameters()):
            torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=1e-6)
        # per step, to each of the 2 servers (ranks 3, 4): its shard's gradient + a 12-byte header, and back its
        # shard's parameters + a 12-byte header (version, staleness, the server's update time)
        for exchange, round_trip in exchanged:
            assert exchange.peer_bytes == {3: [384 + 12, 384 + 12], 4: [268 + 12, 268 + 12]}
            # each server's update ran between this worker's push and its reply: within the worker's round trip
            assert len(exchange.update_s) == 2 and all(0 < u <= round_trip for u in exchange.update_s)
    shard_bytes = {0: 384, 1: 268}  # 96 floats | 67 floats
    for index, stats in enumerate(outputs[workers:]):
        assert (stats.updates, stats.pushes) == (steps, steps * workers)
        assert stats.bytes_recv == steps * workers * (shard_bytes[index] + 12)
        assert stats.bytes_sent == (steps + 1) * workers * (shard_bytes[index] + 12)  # + the initial pull
