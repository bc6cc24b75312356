"""Cost models (Strategy.step_time) against hand-computed cases, projection from a hand-written run
directory, and the validation benchmark's error arithmetic. No process is launched."""
import json

import pytest
import yaml

from bench.projection import error, summarize
from metrics.bounds import Round
from metrics.project import Cost, Link, main, measure, parse_link, stops_scaling
from strategies.allreduce import AllReduce
from strategies.hivemind import Hivemind
from strategies.ps import ParameterServer
from strategies.ring import Ring
from strategies.single import Single
from strategies.stepwise import Stepwise

MB = 1e6
pytestmark = pytest.mark.timeout(60)


def test_ring_allreduce():
    # 2(N-1) steps of S/N: 2·3·(8 MB / 4) / 12.5 MB/s = 0.96 s
    assert Ring.step_time(Cost(4, 8 * MB, 12.5 * MB)) == pytest.approx(0.96)
    # latency: 2·3·(0.001 s + 0.16 s) = 0.966 s
    assert Ring.step_time(Cost(4, 8 * MB, 12.5 * MB, latency=0.001)) == pytest.approx(0.966)
    # compute 0.3 s, 2/3 of it overlappable (0.2 s): 0.3 + (0.96 - 0.2) = 1.06 s
    assert Ring.step_time(Cost(4, 8 * MB, 12.5 * MB, compute=0.3)) == pytest.approx(1.06)
    # all-reduce every 2nd step: 0.3 + 0.76 / 2 = 0.68 s
    assert Ring.step_time(Cost(4, 8 * MB, 12.5 * MB, compute=0.3, knobs={"backward_passes_per_step": 2})) \
        == pytest.approx(0.68)
    # communication shorter than the overlappable compute is hidden: 3 s + max(0, 0.96 - 2) = 3 s
    assert Ring.step_time(Cost(4, 8 * MB, 12.5 * MB, compute=3.0)) == pytest.approx(3.0)


def test_allreduce_overlaps_only_with_ddp():
    ddp = Cost(4, 8 * MB, 12.5 * MB, compute=0.3, knobs={"transport": "gloo", "ddp": True})
    assert AllReduce.step_time(ddp) == pytest.approx(0.3 + 0.96 - 0.2)
    flat = Cost(4, 8 * MB, 12.5 * MB, compute=0.3, knobs={"transport": "gloo", "ddp": False})
    assert AllReduce.step_time(flat) == pytest.approx(0.3 + 0.96)
    mpi = Cost(4, 8 * MB, 12.5 * MB, compute=0.3, knobs={"transport": "mpi", "ddp": True})
    assert AllReduce.step_time(mpi) == pytest.approx(1.26)


def test_parameter_server():
    sync = {"servers": 1, "mode": "sync"}
    # push then pull at the server link: 2·(0.01 s + 4 · 1 MB / 1 MB/s) + 0.5 s = 8.52 s
    assert ParameterServer.step_time(Cost(4, MB, MB, latency=0.01, compute=0.5, knobs=sync)) == pytest.approx(8.52)
    # two servers halve the in-cast: 2·(0.01 + 2) = 4.02 s
    assert ParameterServer.step_time(Cost(4, MB, MB, latency=0.01, knobs=sync | {"servers": 2})) \
        == pytest.approx(4.02)
    # eight servers: the worker link (S/beta = 1 s) limits: 2·(0.01 + 1) = 2.02 s
    assert ParameterServer.step_time(Cost(4, MB, MB, latency=0.01, knobs=sync | {"servers": 8})) \
        == pytest.approx(2.02)
    # async: 2·0.01 + max(2 · 1 MB, 4 · 1 MB / 1) / 1 MB/s = 4.02 s; with 4 servers the worker link: 2.02 s
    assert ParameterServer.step_time(Cost(4, MB, MB, latency=0.01, knobs={"servers": 1, "mode": "async"})) \
        == pytest.approx(4.02)
    assert ParameterServer.step_time(Cost(4, MB, MB, latency=0.01, knobs={"servers": 4, "mode": "async"})) \
        == pytest.approx(2.02)


def test_stepwise_chain():
    one_pass = {"chunks": 4, "every": 1, "second_pass": False}
    # (c + N - 2) chunk hops of 1 MB at 1 MB/s: (4 + 4 - 2) · 1 s = 6 s
    assert Stepwise.step_time(Cost(4, 4 * MB, MB, knobs=one_pass)) == pytest.approx(6.0)
    # with 10 ms per message: 6 · 1.01 s = 6.06 s; a round every 2nd step: 3.03 s per step
    assert Stepwise.step_time(Cost(4, 4 * MB, MB, latency=0.01, knobs=one_pass)) == pytest.approx(6.06)
    assert Stepwise.step_time(Cost(4, 4 * MB, MB, latency=0.01, knobs=one_pass | {"every": 2})) \
        == pytest.approx(3.03)
    # second pass: max(2c, c + 2N - 3) = max(8, 9) = 9 hops at N=4; max(8, 7) = 8 at N=3
    assert Stepwise.step_time(Cost(4, 4 * MB, MB, knobs=one_pass | {"second_pass": True})) == pytest.approx(9.0)
    assert Stepwise.step_time(Cost(3, 4 * MB, MB, knobs=one_pass | {"second_pass": True})) == pytest.approx(8.0)


def test_hivemind_epoch_amortised():
    knobs = {"matchmaking_time": 5.0, "target_batch_size": 256}
    # N=4, batch 32: 256 / 128 = 2 steps per epoch; epoch = 5 + 2·3/4 · 3 MB / 1 MB/s + 3 · 0.01 = 9.53 s
    # per step: 0.1 + 9.53 / 2 = 4.865 s
    assert Hivemind.step_time(Cost(4, 3 * MB, MB, latency=0.01, compute=0.1, batch=32, knobs=knobs)) \
        == pytest.approx(4.865)
    # N=16: 512 samples per step > 256, one epoch per step: 0.1 + 5 + 2·15/16 · 3 + 15 · 0.01 = 10.875 s
    assert Hivemind.step_time(Cost(16, 3 * MB, MB, latency=0.01, compute=0.1, batch=32, knobs=knobs)) \
        == pytest.approx(10.875)


def test_single_is_compute_only():
    assert Single.step_time(Cost(64, 8 * MB, MB, latency=1.0, compute=0.25)) == 0.25


def test_averaged_bytes_inverts_the_payload_relation():
    # ring: P = 2(N-1)/N · S, so P = 1.5 MB at N=4 is S = 1 MB
    assert Ring.averaged_bytes(Round(1.5 * MB, 4, MB)) == pytest.approx(MB)
    assert AllReduce.averaged_bytes(Round(1.5 * MB, 4, MB)) == pytest.approx(MB)
    assert Hivemind.averaged_bytes(Round(MB, 2, MB)) == pytest.approx(MB)
    assert ParameterServer.averaged_bytes(Round(MB, 4, MB)) == MB
    assert Stepwise.averaged_bytes(Round(MB, 4, MB, {"second_pass": False})) == MB
    assert Stepwise.averaged_bytes(Round(2 * MB, 4, MB, {"second_pass": True})) == MB


def test_links():
    assert parse_link("wan") == Link("wan", 100.0, 0.0, "conf/network/wan.yaml")
    wan = parse_link("wan,40")
    assert (wan.mbit, wan.latency_ms) == (100.0, 40.0)
    given = parse_link("1000,0.2")
    assert (given.mbit, given.latency_ms) == (1000.0, 0.2)
    with pytest.raises(ValueError, match="sets no link rate"):
        parse_link("datacenter")
    with pytest.raises(ValueError, match="no network preset"):
        parse_link("moon")


def test_stops_scaling():
    rows = [{"peers": n, "throughput_samples_per_s": t} for n, t in [(16, 100), (32, 180), (64, 190)]]
    assert stops_scaling(rows) == {"stops_scaling_at": 64, "gain_per_doubling": pytest.approx(190 / 180 - 1),
                                   "from_peers": 32}
    # 16 -> 64 is two doublings: 100 -> 121 is 10 % per doubling, which still scales
    assert stops_scaling([{"peers": 16, "throughput_samples_per_s": 100},
                          {"peers": 64, "throughput_samples_per_s": 121.0001}]) == {"stops_scaling_at": None}


def write_run(path, target: str, knobs: dict, workers: int, payload: int, mbit: float, train_s: list[float]):
    """A finished run as train.py leaves it: summary, config, launch spec, network, per-worker step logs.
    Every step: data 0.01 s, compute 0.04 s, opt 0 s, `payload` bytes each way, batch 32; the target is
    reached at the last step (samples_to_target: every worker's samples by then)."""
    steps = len(train_s)
    config = {"strategy": {"name": target.split(".")[1].split(":")[0], "target": target},
              "network": {"name": "emulated", "bandwidth_mbit": mbit, "latency_ms": 0}, "peers": workers}
    (path / ".avgbench").mkdir(parents=True)
    (path / ".avgbench" / "config.yaml").write_text(yaml.safe_dump(config))
    (path / ".avgbench" / "launch.json").write_text(json.dumps({"batch_size": 32}))
    hosts = [{"index": i, "bandwidth_mbit": mbit, "latency_ms": 0.0} for i in range(workers + 1)]
    (path / ".avgbench" / "network.json").write_text(json.dumps({"hosts": hosts}))
    (path / "summary.json").write_text(json.dumps({"config": config, "strategy_knobs": knobs,
                                                   "samples_to_target": workers * 32 * steps, "workers": workers}))
    for rank in range(workers):
        peer = path / f"peer{rank}"
        peer.mkdir()
        peer.joinpath("steps.jsonl").write_text("".join(json.dumps(
            {"step": k + 1, "train_s": t, "samples": 32 * (k + 1), "data_s": 0.01, "compute_s": 0.04, "opt_s": 0.0,
             "comm_s": 1.0, "bytes_sent": payload, "bytes_recv": payload, "round": None}) + "\n"
            for k, t in enumerate(train_s)))


def test_projection_from_a_run_directory(tmp_path):
    run = tmp_path / "ps"
    write_run(run, "strategies.ps:ParameterServer", {"transport": "gloo", "servers": 1, "mode": "sync"},
              workers=2, payload=1_000_000, mbit=20, train_s=[2.0, 3.5, 5.0, 6.5])
    m = measure(run)
    assert (m.workers, m.batch, m.size_bytes, m.compute_s) == (2, 32, 1e6, pytest.approx(0.05))
    assert m.measured_step_s == pytest.approx(1.5)  # (6.5 - 2.0) / 3: steps 2..4
    assert m.samples_to_target == 2 * 4 * 32
    # on its own link: 0.05 + 2 · max(1 MB, 2 · 1 MB) / 2.5 MB/s = 1.65 s
    assert m.step_s(2, m.link) == pytest.approx(1.65)

    assert main([str(run), "--peers", "8", "16", "--link", "wan"]) == 0
    out = json.loads((run / "projection.json").read_text())
    (projection,) = out["runs"][0]["projections"]
    eight, sixteen = projection["rows"]
    # N=8 on wan (12.5 MB/s): 0.05 + 2 · 8 · 1 MB / 12.5 MB/s = 1.33 s; throughput 8 · 32 / 1.33 samples/s;
    # time-to-target: the 256 samples the run needed / that throughput
    assert eight["step_s"] == pytest.approx(1.33)
    assert eight["throughput_samples_per_s"] == pytest.approx(256 / 1.33)
    assert eight["time_to_target_s"] == pytest.approx(256 / (256 / 1.33))
    # N=16: 0.05 + 2.56 = 2.61 s; throughput 512 / 2.61 = 196.2 vs 192.5 samples/s: +1.9 %, stops scaling
    assert sixteen["step_s"] == pytest.approx(2.61)
    assert projection["stops_scaling_at"] == 16
    assert out["runs"][0]["model_check"]["error"] == pytest.approx(1.65 / 1.5 - 1)
    assert (run / "projection.png").stat().st_size > 0


def test_ring_payload_relation_from_a_run_directory(tmp_path):
    run = tmp_path / "allreduce"
    # 4 workers moved P = 1.5 MB per step: S = 1.5 · 4 / 6 = 1 MB
    write_run(run, "strategies.allreduce:AllReduce", {"transport": "gloo", "ddp": True, "bucket_cap_mb": 25},
              workers=4, payload=1_500_000, mbit=100, train_s=[1.0, 1.2, 1.4])
    m = measure(run)
    assert m.size_bytes == pytest.approx(1e6)
    # N=16 at 100 Mbit/s: 2 · 15 · 1 MB / 16 / 12.5 MB/s = 0.15 s, less 2/3 of 0.05 s hidden: 0.05 + 0.11667 s
    assert m.step_s(16, Link("x", 100, 0, "test")) == pytest.approx(0.05 + 0.15 - 0.05 * 2 / 3)


def test_projection_needs_a_link_for_unshaped_runs(tmp_path, capsys):
    run = tmp_path / "ps"
    write_run(run, "strategies.ps:ParameterServer", {"servers": 1, "mode": "sync"}, workers=2, payload=1000,
              mbit=None, train_s=[1.0, 2.0])
    assert main([str(run)]) == 2
    assert "give --link" in capsys.readouterr().err


def test_validation_error_arithmetic():
    assert error(1.1, 1.0) == pytest.approx(0.1)
    assert error(0.8, 1.0) == pytest.approx(-0.2)
    rows = [{"strategy": "ps", "error": 0.1, "link_bound": True}, {"strategy": "ps", "error": -0.3, "link_bound": False},
            {"strategy": "ring", "error": 0.05, "link_bound": True}]
    figures = summarize(rows)
    assert figures["median_abs_error"] == pytest.approx(0.1)
    assert figures["median_abs_error_by_strategy"] == {"ps": pytest.approx(0.2), "ring": pytest.approx(0.05)}
    assert figures["within_15_percent"] == pytest.approx(2 / 3)
    # cases where the machine, not the link, set the pace are left out of the link-bound figures
    bound = figures["link_bound_cases"]
    assert bound["median_abs_error_by_strategy"] == {"ps": pytest.approx(0.1), "ring": pytest.approx(0.05)}
    assert bound["cases"] == 2 and bound["within_15_percent"] == 1.0
