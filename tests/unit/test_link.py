"""The link a run measures (unit tier): network=auto, the default, resolves to emulated per-host links where they can be
built and to loopback with a warning where not; the first line names the link; the goodput meter's tallies and the
summary's link verdict. The emulated links themselves, and a throttled one caught, are in
tests/integration/test_netem.py."""
import json

import pytest

from helpers import compose_config
from job.errors import ConfigError
from launchers.config import strategy_class, validate
from launchers.placement import NamespacePlacement
from metrics.recording.rundir import RunDir
from metrics.summary.link import FAITHFUL_SHARE, MIN_BUSY_INTERVALS, judge, link_section
from netemu.auto import choose_link, link_line
from netemu.goodput import DRAIN_AIM, DirectionTally, LinkMeter, Reading

pytestmark = pytest.mark.timeout(60)

NO_NAMESPACES = ("network=emulated cannot create namespaces, veth pairs or tbf here: unshare: unshare failed: "
                 "Operation not permitted")
FITS = {"fits": True, "cores": 4, "oversubscription": 0.5}


def can_emulate():
    return None


def cannot_emulate():
    return NO_NAMESPACES


def never_probed():
    raise AssertionError("network=auto probed the machine for a run that needs no link")


def chosen(*overrides: str, problem=can_emulate, shape=FITS):
    cfg = compose_config(*overrides)
    validate(cfg)  # network=auto passes validation without a probe (which would start a process)
    processes = strategy_class(cfg).launch_spec(cfg).processes
    choice = choose_link(cfg, processes, int(cfg.launch.nnodes), problem)
    return cfg, choice, link_line(choice, shape)


def test_the_default_network_is_auto_at_the_conf_files_rate():
    cfg = compose_config("strategy=ring")
    assert cfg.network.name == "auto"
    assert cfg.network.bandwidth_mbit > 0 and cfg.network.latency_ms == 0


def test_auto_emulates_per_host_links_where_namespaces_can_be_built():
    cfg, choice, line = chosen("strategy=ps", "peers=2")
    rate = compose_config().network.bandwidth_mbit
    assert cfg.network.name == "emulated"  # what the placement and the peers read
    assert (choice.kind, choice.scope, choice.processes) == ("emulated", "per-host", 3)  # 2 workers + the server
    assert choice.rate_mbit_by_host == [rate] * 3
    assert line.startswith(f"avgbench: link: emulated, per host: {rate:g} Mbit/s each way in 9000-byte frames, no "
                           "added latency; "
                           "3 emulated hosts (network=auto")
    assert "oversubscribed" not in line


def test_auto_falls_back_to_loopback_with_a_first_line_warning():
    cfg, choice, line = chosen("strategy=ring", "peers=2", problem=cannot_emulate)
    assert cfg.network.name == "loopback"
    assert (choice.kind, choice.scope, choice.reason) == ("loopback", "shared", NO_NAMESPACES)
    assert line.startswith("avgbench: warning: link: this machine's loopback, shared by all 2 processes")
    assert NO_NAMESPACES in line and "differ only by their compute share" in line
    assert "network=emulated network.bandwidth_mbit=RATE asks for one" in line


def test_asked_for_loopback_stays_loopback_without_a_probe():
    cfg, choice, line = chosen("strategy=ring", "peers=2", "network=loopback", problem=never_probed)
    assert (cfg.network.name, choice.kind, choice.reason) == ("loopback", "loopback", None)
    assert line.startswith("avgbench: link: this machine's loopback") and "warning" not in line


@pytest.mark.parametrize("overrides", [["strategy=single"], ["strategy=single", "peers=2"]])
def test_one_process_needs_no_link(overrides):
    """The baselines: one process (peers=2 is the equal-resource baseline, one process of 2 CPUs)."""
    cfg, choice, line = chosen(*overrides, problem=never_probed)
    assert (cfg.network.name, choice.kind, line) == ("loopback", "none", None)


def test_several_machines_use_their_own_network():
    cfg, choice, line = chosen("strategy=allreduce", "peers=4", "launch.nnodes=2", "launch.master_port=29511",
                               problem=never_probed)
    assert (cfg.network.name, choice.kind, choice.processes) == ("loopback", "hosts", 2)
    assert "the machines' own network" in line


def test_hivemind_8_peers_get_hosts_of_their_own_and_are_told_of_oversubscription(tmp_path):
    oversubscribed = {"fits": False, "cores": 2, "oversubscription": 4.0}
    cfg, choice, line = chosen("strategy=hivemind", "peers=8", shape=oversubscribed)
    assert (cfg.network.name, choice.processes) == ("emulated", 8)
    assert "8 emulated hosts on 2 cores: oversubscribed 4x" in line
    placement = NamespacePlacement(cfg, RunDir(tmp_path), choice.processes, 1)
    assert len(placement.bandwidths) == 8 and None not in placement.bandwidths


@pytest.mark.parametrize("problem", [can_emulate, cannot_emulate])
def test_ring_keeps_its_gloo_controller_wherever_auto_puts_it(problem, monkeypatch):
    """Emulated hosts are machines of their own by name, so horovodrun --gloo reaches them as it does loopback."""
    cfg, _, _ = chosen("strategy=ring", "peers=2", problem=problem)
    monkeypatch.setattr("netemu.checks.emulation_problem", problem)  # the probe would start a process
    validate(cfg)  # as train.py does once network=auto is resolved
    assert "--gloo" in strategy_class(cfg).launch_spec(cfg).launcher_args


def test_ring_hosts_are_refused_on_emulated_hosts(monkeypatch):
    cfg, _, _ = chosen("strategy=ring", "peers=2", "ring.hosts=[localhost:2]", problem=can_emulate)
    monkeypatch.setattr("netemu.checks.emulation_problem", can_emulate)
    with pytest.raises(ConfigError, match="with network=emulated, strategy=ring takes no ring.hosts"):
        validate(cfg)


def test_a_latency_and_per_host_rates_are_named():
    _, _, line = chosen("strategy=ring", "peers=2", "network.per_peer=[100,20]", "network.latency_ms=5",
                        "network.mtu=1500")
    assert "Mbit/s by host 100, 20 each way in 1500-byte frames, 5 ms one-way latency" in line


# --- goodput while busy -------------------------------------------------------------------
RATE = 100.0                # Mbit/s nominal
BYTES_PER_S = RATE * 1e6 / 8


def reading(t: float, sent: int, queued: int, query_s: float = 0.0002) -> Reading:
    return Reading(t, t + query_s, sent, queued)


def test_an_interval_its_queue_outlasts_is_busy_and_its_goodput_is_the_rate_the_link_kept():
    tally = DirectionTally(0, "egress", RATE)
    queued = int(BYTES_PER_S * 0.010)  # 10 ms of traffic at the nominal rate
    tally.add(reading(0.0, 1_000_000, queued))
    tally.add(reading(0.006, 1_000_000 + int(0.9 * BYTES_PER_S * 0.006), queued))  # 6 ms later, at 90 Mbit/s
    figures = tally.figures()
    assert figures["busy_intervals"] == 1 and figures["busy_s"] == pytest.approx(0.006)
    assert figures["busy_bytes"] * 8 / figures["busy_s"] / 1e6 == pytest.approx(90, rel=1e-3)


def test_a_shallow_queue_at_both_ends_of_a_long_interval_is_not_busy():
    # 5 KB queued at both ends of 0.1 s: drained in 0.4 ms, then the link idled; 0.3 of its rate went through
    tally = DirectionTally(0, "egress", RATE)
    tally.add(reading(0.0, 0, 5000))
    tally.add(reading(0.1, int(0.3 * BYTES_PER_S * 0.1), 5000))
    assert (tally.busy_intervals, tally.busy_bytes, tally.busy_s) == (0, 0, 0.0)
    assert tally.carried_bytes == int(0.3 * BYTES_PER_S * 0.1)


def test_an_interval_counts_from_the_first_readings_start_to_the_seconds_end():
    tally = DirectionTally(0, "egress", RATE)
    queued = int(BYTES_PER_S * 0.010)
    tally.add(Reading(0.0, 0.002, 0, queued))
    tally.add(Reading(0.008, 0.0105, int(BYTES_PER_S * 0.008), queued))  # midpoints 8 ms apart, the span 10.5 ms
    assert tally.busy_intervals == 0


def test_a_restarted_counter_is_skipped():
    tally = DirectionTally(0, "egress", RATE)
    queued = int(BYTES_PER_S * 0.010)
    tally.add(reading(0.0, 10_000_000, queued))
    tally.add(reading(0.004, 2_000, queued))  # the qdisc was replaced: its counters start again
    tally.add(reading(0.008, 2_000 + int(BYTES_PER_S * 0.004), queued))
    assert (tally.busy_intervals, tally.busy_bytes) == (1, int(BYTES_PER_S * 0.004))
    assert tally.busy_s == pytest.approx(0.004)


class ScriptedReader:
    """Stands in for a tc process: each query answers the next (bytes sent, backlog) of `answers` as tc's JSON."""

    def __init__(self, answers: list[tuple[int, int]]):
        self.answers, self.queries = list(answers), 0

    def qdiscs(self, device: str) -> list[dict]:
        self.queries += 1
        sent, backlog = self.answers.pop(0)
        return [{"kind": "tbf", "root": True, "bytes": sent, "backlog": backlog}]


def metered(answers: list[tuple[int, int]], passes: int) -> tuple[DirectionTally, ScriptedReader]:
    meter = LinkMeter.__new__(LinkMeter)  # its plan only: no fabric, no tc
    reader, tally = ScriptedReader(answers), DirectionTally(0, "egress", RATE)
    meter.plan, meter.readings, meter.first_reading = [(reader, "eth0", tally)], 0, None  # type: ignore[list-item]
    for _ in range(passes):
        meter.read_once()
    return tally, reader


def test_the_meter_reads_a_direction_again_only_where_it_found_a_queue():
    queued = int(BYTES_PER_S * 0.020)  # 20 ms of traffic: read again after about 12 ms
    tally, reader = metered([(0, 0), (100, queued), (100 + int(BYTES_PER_S * 0.012), 0), (200_000, 0)], passes=3)
    assert reader.queries == 4 and not reader.answers  # 3 passes, one of them found a queue
    assert tally.busy_intervals == 1
    assert 0.3 * 0.020 < tally.busy_s < DRAIN_AIM * 0.020 * 1.5  # waited before the second reading, not past the drain


def busy_for(intervals: int, rate_mbit: float, nominal: float, host: int = 0, direction: str = "egress") -> dict:
    seconds = intervals * 0.005  # 5 ms busy intervals
    return {"host": host, "direction": direction, "nominal_mbit": nominal, "carried_bytes": 0,
            "busy_bytes": int(rate_mbit * 1e6 / 8 * seconds), "busy_s": seconds, "busy_intervals": intervals}


def test_judge_names_the_direction_that_fell_short_with_its_figure():
    verdict = judge([busy_for(50, 99, 100), busy_for(40, 70, 100, host=1, direction="ingress"),
                     busy_for(MIN_BUSY_INTERVALS - 1, 10, 100)])  # too few intervals to be judged
    assert verdict["faithful"] is False
    assert verdict["worst_direction"] == "host 1 ingress"
    assert verdict["goodput_mbit"] == pytest.approx(70) and verdict["goodput_share"] == pytest.approx(0.7)
    assert verdict["busy_intervals"] == 40 and verdict["busy_s"] == pytest.approx(0.2)
    assert "host 1 ingress carried 70.0 of its 100 Mbit/s (70%) in 40 intervals" in verdict["reason"]


def test_judge_compares_each_direction_with_its_own_rate():
    verdict = judge([busy_for(50, 19.8, 20), busy_for(50, 95, 100, host=1)])  # 99 % and 95 %
    assert verdict["faithful"] is True and verdict["nominal_mbit"] == 100 and verdict["goodput_share"] == pytest.approx(0.95)
    assert judge([busy_for(50, 0.999 * FAITHFUL_SHARE * 100, 100)])["faithful"] is False


def test_a_link_never_busy_often_enough_is_not_judged():
    verdict = judge([busy_for(MIN_BUSY_INTERVALS - 1, 10, 100)])
    assert verdict["faithful"] is None and verdict["goodput_mbit"] is None
    assert f"no direction had {MIN_BUSY_INTERVALS} busy intervals (most: {MIN_BUSY_INTERVALS - 1})" in verdict["reason"]
    old_meter = busy_for(100, 10, 100)
    del old_meter["busy_intervals"]  # a meter from before busy intervals were counted
    assert judge([old_meter])["faithful"] is None


# --- summary.json's link section -------------------------------------------------------------
def write_link(run: RunDir, kind: str, meter: dict | None = None, asked: str = "auto", reason=None):
    run.private.mkdir(parents=True)
    run.link.write_text(json.dumps({"asked": asked, "kind": kind, "scope": "per-host", "processes": 2,
                                    "rate_mbit_by_host": [100, 100], "latency_ms": 0.0, "reason": reason}))
    if meter is not None:
        run.link_meter.write_text(json.dumps(meter))


def test_summary_link_marks_a_link_that_did_not_hold(tmp_path):
    run = RunDir(tmp_path)
    write_link(run, "emulated", {"sample_s": 0.1, "readings": 80, "error": None,
                                 "directions": [busy_for(60, 52, 100), busy_for(60, 100, 100, host=1)]})
    link = link_section(run, {"network": {"name": "auto"}})
    assert (link["kind"], link["asked"], link["hosts"], link["faithful"]) == ("emulated", "auto", 2, False)
    assert link["nominal_mbit"] == 100 and link["goodput_mbit"] == pytest.approx(52) and link["busy_intervals"] == 60
    assert "did not hold" in link["reason"]
    assert [d["goodput_mbit"] for d in link["by_direction"]] == [pytest.approx(52), pytest.approx(100)]


def test_summary_link_on_loopback_and_when_metering_failed(tmp_path):
    loopback = RunDir(tmp_path / "a")
    write_link(loopback, "loopback", reason=NO_NAMESPACES)
    link = link_section(loopback, {"network": {"name": "auto"}})
    assert (link["kind"], link["scope"], link["faithful"], link["reason"]) == ("loopback", "per-host", None,
                                                                                NO_NAMESPACES)
    failed = RunDir(tmp_path / "b")
    write_link(failed, "emulated", {"sample_s": 0.1, "readings": 3, "error": "tc ended", "directions": []})
    assert link_section(failed, {"network": {"name": "auto"}})["reason"] == "tc ended"
