"""Every use of hivemind 1.1.12's private API, in one place (tests/unit/test_private_apis.py fails if an upgrade
moves one): exact byte and event accounting (`install`, counters in shared memory that every process of a peer adds
to; rounds in peer<R>/rounds.jsonl: docs/strategies.md, hivemind) and `cloning_state_averager`."""
import contextlib
import json
import logging
import multiprocessing
import os
import re
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:  # hivemind ships no type information: these name its classes (Any to mypy)
    from hivemind.averaging.allreduce import AllReduceRunner
    from hivemind.averaging.averager import DecentralizedAverager, GatheredData
    from hivemind.averaging.group_info import GroupInfo
    from hivemind.compression import CompressionInfo
    from hivemind.optim.state_averager import TrainingStateAverager
    from hivemind.proto import averaging_pb2, runtime_pb2

FIELDS = (
    "allreduce_bytes_sent", "allreduce_bytes_recv", "state_download_bytes_recv",
    "allreduce_rounds_done", "allreduce_rounds_failed", "allreduce_ns",
    "log_averaged_gradients", "log_local_gradients", "log_no_group", "log_reducer_partial",
    "log_out_of_sync", "log_state_downloaded", "log_averaged_parameters",
    "local_epoch",  # not a count: the training thread's hivemind.Optimizer.local_epoch, for the round records
)
ROUND_FIELDS = ("kind", "epoch", "group_id", "group_size", "started_at", "duration_s", "bytes_sent", "bytes_recv",
                "overlapped", "success", "error")

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

    def __init__(self) -> None:
        self.array = multiprocessing.get_context("fork").Array("q", len(FIELDS))

    def add(self, name: str, value: int = 1) -> None:
        with self.array.get_lock():
            self.array[FIELDS.index(name)] += int(value)

    def set(self, name: str, value: int) -> None:
        with self.array.get_lock():
            self.array[FIELDS.index(name)] = int(value)

    def snapshot(self) -> dict[str, int]:
        with self.array.get_lock():
            return dict(zip(FIELDS, self.array[:]))


class LogCounter(logging.Handler):
    """Counts hivemind's important log lines (in every process of the peer)."""

    def __init__(self, counters: Counters) -> None:
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


_installed: list[Counters] = []
_rounds_file: list[str] = []  # this peer's rounds.jsonl (inherited by hivemind's forked processes)
_in_process = {"sent": 0, "recv": 0, "active": 0, "overlapped": 0}  # this process's own, per-round attribution


def round_kind(averager: "DecentralizedAverager") -> str:
    """What an averager averages: hivemind.Optimizer's gradient averager or its training-state averager."""
    names = {cls.__name__ for cls in type(averager).__mro__}
    return "gradients" if "GradientAverager" in names else "state" if "TrainingStateAverager" in names else \
        type(averager).__name__


def write_round(record: dict[str, Any]) -> None:
    """One JSON line, one write() on an O_APPEND descriptor: the averagers' processes append side by side."""
    if not _rounds_file:
        return
    fd = os.open(_rounds_file[0], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def install(counters: Counters, rounds_file: str | None = None) -> None:
    """Hook hivemind's all-reduce and logger (once per process); each round appends a record to rounds_file."""
    _rounds_file[:] = [rounds_file] if rounds_file else []
    if _installed:
        _installed[0] = counters
        return
    _installed.append(counters)
    from hivemind.averaging import allreduce, averager

    def current() -> Counters:
        return _installed[0]

    serialize, deserialize = allreduce.serialize_torch_tensor, allreduce.deserialize_torch_tensor
    download_deserialize = averager.deserialize_torch_tensor

    # averaged parts sent back to their senders
    def counted_serialize(*args: Any, **kwargs: Any) -> "runtime_pb2.Tensor":
        message = serialize(*args, **kwargs)
        current().add("allreduce_bytes_sent", len(message.buffer))
        _in_process["sent"] += len(message.buffer)
        return message

    # input parts from senders, averaged parts from owners
    def counted_deserialize(message: "runtime_pb2.Tensor") -> torch.Tensor:
        current().add("allreduce_bytes_recv", len(message.buffer))
        _in_process["recv"] += len(message.buffer)
        return deserialize(message)

    def counted_download(message: "runtime_pb2.Tensor") -> torch.Tensor:
        current().add("state_download_bytes_recv", len(message.buffer))
        return download_deserialize(message)

    generate_inputs = allreduce.AllReduceRunner._generate_input_for_peer

    # our input parts sent to their owners
    async def counted_inputs(self: "AllReduceRunner",
                             peer_index: int) -> AsyncIterator["averaging_pb2.AveragingData"]:
        async for message in generate_inputs(self, peer_index):
            current().add("allreduce_bytes_sent", len(message.tensor_part.buffer))
            _in_process["sent"] += len(message.tensor_part.buffer)
            yield message

    aggregate = averager.DecentralizedAverager._aggregate_with_group

    async def counted_round(self: "DecentralizedAverager", group_info: "GroupInfo", *args: Any,
                            **kwargs: Any) -> "GatheredData":
        started_at, start = time.time(), time.perf_counter_ns()
        epoch_at_start = current().snapshot()["local_epoch"]
        sent, recv = _in_process["sent"], _in_process["recv"]
        _in_process["overlapped"] += _in_process["active"] > 0
        _in_process["active"] += 1
        overlapped_before, error = _in_process["overlapped"], None
        try:
            result = await aggregate(self, group_info, *args, **kwargs)
        except BaseException as exc:
            current().add("allreduce_rounds_failed")
            error = f"{type(exc).__name__}: {exc}"[:300]
            raise
        finally:
            elapsed = time.perf_counter_ns() - start
            current().add("allreduce_ns", elapsed)
            _in_process["active"] -= 1
            write_round({"kind": round_kind(self), "epoch": epoch_at_start,
                         "group_id": group_info.group_id.hex(), "group_size": len(group_info.peer_ids),
                         "started_at": started_at, "duration_s": elapsed / 1e9,
                         "bytes_sent": _in_process["sent"] - sent, "bytes_recv": _in_process["recv"] - recv,
                         "overlapped": _in_process["active"] > 0 or _in_process["overlapped"] != overlapped_before,
                         "success": error is None, "error": error})
        current().add("allreduce_rounds_done")
        return result

    allreduce.serialize_torch_tensor = counted_serialize
    allreduce.deserialize_torch_tensor = counted_deserialize
    averager.deserialize_torch_tensor = counted_download
    allreduce.AllReduceRunner._generate_input_for_peer = counted_inputs
    averager.DecentralizedAverager._aggregate_with_group = counted_round
    logging.getLogger("hivemind").addHandler(LogCounter(counters))


def cloning_state_averager_class() -> type["TrainingStateAverager"]:
    """TrainingStateAverager that hands late peers clones taken under the optimizer lock (hivemind 1.1.12 hands
    the live tensors, whose storage the download moves to shared memory while the optimizer writes them)."""
    from hivemind.optim.state_averager import TrainingStateAverager

    class CloningStateAverager(TrainingStateAverager):
        def get_current_state(self) -> tuple[Any, list[torch.Tensor], Sequence["CompressionInfo"]]:
            with self.lock_optimizer:
                metadata, tensors, infos = super().get_current_state()
                return metadata, [t.detach().clone() for t in tensors], infos

    return CloningStateAverager


@contextlib.contextmanager
def cloning_state_averager() -> Iterator[None]:
    """While hivemind.Optimizer is built, it makes CloningStateAverager its state averager."""
    from hivemind.optim import optimizer as hivemind_optimizer

    original = hivemind_optimizer.TrainingStateAverager
    hivemind_optimizer.TrainingStateAverager = cloning_state_averager_class()
    try:
        yield
    finally:
        hivemind_optimizer.TrainingStateAverager = original
