"""Every use of hivemind 1.1.12's private API, in one place, each with its reason.

tests/test_private_apis.py fails loudly if an upgrade moves any of them:
- byte accounting (install): hivemind has no public counters of what its all-reduce
  sends, so we wrap its serialization points and its round runner (below);
- cloning_state_averager: TrainingStateAverager.get_current_state hands late peers the
  live tensors, which crashed peers with use_local_updates=True (see its docstring);
  hivemind.Optimizer has no parameter to pass our subclass, so it is swapped in while
  the optimizer is built.

Exact byte and event accounting for hivemind, shared by a peer's whole process tree.

hivemind averages in child processes (one per averager, forked from the peer) and
its DHT runs p2pd in another child. Counters live in one shared-memory array made
before those forks, so every process of the peer adds to the same numbers.

Bytes: hivemind's all-reduce is butterfly-style. The flat vector of S bytes is cut
into parts; peer j of the group owns a fraction f_j (load-balanced from announced
bandwidths; client-mode peers own none). Every peer sends each other owner that
owner's part and receives back the averaged part, so peer i sends
(1 - f_i) S (its inputs) + (n - 1) f_i S (averages of its own part) and receives the
same amount; with equal fractions this is 2(n-1)/n x S, a ring's payload. We do
not use the formula: we count the serialized tensor bytes (`runtime_pb2.Tensor.buffer`,
after compression) of every part the peer's all-reduce sends and deserializes,
which is exact for any group size, fractions, compression and partial round.
Protocol framing (protobuf headers, libp2p, TCP) is not payload and not counted.
"""
import contextlib
import logging
import multiprocessing
import re
import time

FIELDS = (
    "allreduce_bytes_sent", "allreduce_bytes_recv", "state_download_bytes_recv",
    "allreduce_rounds_done", "allreduce_rounds_failed", "allreduce_ns",
    "log_averaged_gradients", "log_local_gradients", "log_no_group", "log_reducer_partial",
    "log_out_of_sync", "log_state_downloaded", "log_averaged_parameters",
)
MAX_GROUP = 16  # group sizes counted one by one up to this; larger groups count as group_of_more
GROUP_FIELDS = (*(f"group_of_{n}" for n in range(1, MAX_GROUP + 1)), "group_of_more")
FIELDS += GROUP_FIELDS
GROUP_SIZE = re.compile(r"Averaged (?:gradients|parameters) with (\d+) peers")

# hivemind log line -> counter (the lines that say how averaging went)
LOG_PATTERNS = (
    (re.compile(r"Averaged gradients with \d+ peers"), "log_averaged_gradients"),
    (re.compile(r"Proceeding with local gradients"), "log_local_gradients"),
    (re.compile(r"could not find a group"), "log_no_group"),
    (re.compile(r"Reducer: received [\d.]+% of input tensors"), "log_reducer_partial"),
    (re.compile(r"Peer is out of sync"), "log_out_of_sync"),
    (re.compile(r"Finished downloading state in"), "log_state_downloaded"),
    (re.compile(r"Averaged parameters with \d+ peers"), "log_averaged_parameters"),
)


class Counters:
    """int64 counters in shared memory; create before hivemind forks its processes."""

    def __init__(self):
        self.array = multiprocessing.get_context("fork").Array("q", len(FIELDS))

    def add(self, name: str, value: int = 1) -> None:
        with self.array.get_lock():
            self.array[FIELDS.index(name)] += int(value)

    def snapshot(self) -> dict[str, int]:
        with self.array.get_lock():
            return dict(zip(FIELDS, self.array[:]))


class LogCounter(logging.Handler):
    """Counts hivemind's important log lines (in every process of the peer)."""

    def __init__(self, counters: Counters):
        super().__init__(logging.DEBUG)
        self.counters = counters

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record must never break hivemind
            return
        for pattern, name in LOG_PATTERNS:
            if pattern.search(message):
                self.counters.add(name)
        if size := GROUP_SIZE.search(message):
            n = int(size.group(1))
            self.counters.add(f"group_of_{n}" if n <= MAX_GROUP else "group_of_more")


_installed: list[Counters] = []


def install(counters: Counters) -> None:
    """Hook hivemind's all-reduce (serialization points, rounds) and logger; once per process."""
    if _installed:
        _installed[0] = counters
        return
    _installed.append(counters)
    from hivemind.averaging import allreduce, averager

    def current() -> Counters:
        return _installed[0]

    serialize, deserialize = allreduce.serialize_torch_tensor, allreduce.deserialize_torch_tensor
    download_deserialize = averager.deserialize_torch_tensor

    def counted_serialize(*args, **kwargs):  # averaged parts sent back to their senders
        message = serialize(*args, **kwargs)
        current().add("allreduce_bytes_sent", len(message.buffer))
        return message

    def counted_deserialize(message):  # input parts from senders, averaged parts from owners
        current().add("allreduce_bytes_recv", len(message.buffer))
        return deserialize(message)

    def counted_download(message):
        current().add("state_download_bytes_recv", len(message.buffer))
        return download_deserialize(message)

    generate_inputs = allreduce.AllReduceRunner._generate_input_for_peer

    async def counted_inputs(self, peer_index):  # our input parts sent to their owners
        async for message in generate_inputs(self, peer_index):
            current().add("allreduce_bytes_sent", len(message.tensor_part.buffer))
            yield message

    aggregate = averager.DecentralizedAverager._aggregate_with_group

    async def counted_round(self, *args, **kwargs):
        start = time.perf_counter_ns()
        try:
            result = await aggregate(self, *args, **kwargs)
        except BaseException:
            current().add("allreduce_rounds_failed")
            raise
        finally:
            current().add("allreduce_ns", time.perf_counter_ns() - start)
        current().add("allreduce_rounds_done")
        return result

    allreduce.serialize_torch_tensor = counted_serialize
    allreduce.deserialize_torch_tensor = counted_deserialize
    averager.deserialize_torch_tensor = counted_download
    allreduce.AllReduceRunner._generate_input_for_peer = counted_inputs
    averager.DecentralizedAverager._aggregate_with_group = counted_round
    logging.getLogger("hivemind").addHandler(LogCounter(counters))


def cloning_state_averager_class():
    """TrainingStateAverager that hands late peers clones taken under the optimizer lock.

    hivemind 1.1.12 returns the live tensors; pickling them for the download moves
    their storage to shared memory while the optimizer thread writes them, which
    crashed peers with use_local_updates=True.
    """
    from hivemind.optim.state_averager import TrainingStateAverager

    class CloningStateAverager(TrainingStateAverager):
        def get_current_state(self):
            with self.lock_optimizer:
                metadata, tensors, infos = super().get_current_state()
                return metadata, [t.detach().clone() for t in tensors], infos

    return CloningStateAverager


@contextlib.contextmanager
def cloning_state_averager():
    """While hivemind.Optimizer is built, it makes CloningStateAverager its state averager."""
    from hivemind.optim import optimizer as hivemind_optimizer

    with _substituted(hivemind_optimizer, "TrainingStateAverager", cloning_state_averager_class()):
        yield


@contextlib.contextmanager
def _substituted(module, name: str, value):
    original = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, original)
