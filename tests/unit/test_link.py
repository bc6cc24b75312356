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
from metrics.summary.link import FAITHFUL_SHARE, MIN_BUSY_S, judge, link_section
from netemu.auto import choose_link, link_line
from netemu.goodput import DirectionTally

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
def readings(tally: DirectionTally, rate_mbit: float, queued: list[int], start_bytes: int = 0, dt: float = 0.1):
    """Feed a tally one reading per entry of `queued` (bytes in the queue), the link sending at `rate_mbit` in
    every interval that began with a queue and nothing otherwise."""
    sent, t = start_bytes, 0.0
    for i, queue in enumerate(queued):
        if i and queued[i - 1]:
            sent += int(rate_mbit * 1e6 / 8 * dt)
        tally.add(t, sent, queue)
        t += dt
    return tally


def test_goodput_counts_only_intervals_with_a_queue_at_both_ends():
    tally = DirectionTally(0, "egress", 100.0)
    readings(tally, 60.0, [0, 5000, 8000, 9000, 0, 0, 7000, 7000, 0])  # busy: 5000-8000, 8000-9000, 7000-7000
    figures = tally.figures()
    assert figures["busy_s"] == pytest.approx(0.3)
    assert figures["busy_bytes"] * 8 / figures["busy_s"] / 1e6 == pytest.approx(60.0)
    assert figures["carried_bytes"] == 5 * int(60e6 / 8 * 0.1)  # the busy ones and the ones draining a queue


def test_a_restarted_counter_is_skipped():
    tally = DirectionTally(0, "egress", 100.0)
    tally.add(0.0, 10_000_000, 3000)
    tally.add(0.1, 2_000, 3000)  # the qdisc was replaced: its counters start again
    tally.add(0.2, 2_000 + 1_250_000, 3000)
    assert (tally.busy_bytes, tally.busy_s) == (1_250_000, pytest.approx(0.1))


def busy_for(seconds: float, rate_mbit: float, nominal: float, host: int = 0, direction: str = "egress") -> dict:
    return {"host": host, "direction": direction, "nominal_mbit": nominal, "carried_bytes": 0,
            "busy_bytes": int(rate_mbit * 1e6 / 8 * seconds), "busy_s": seconds}


def test_judge_names_the_direction_that_fell_short_with_its_figure():
    verdict = judge([busy_for(5, 99, 100), busy_for(4, 70, 100, host=1, direction="ingress"), busy_for(0.5, 10, 100)])
    assert verdict["faithful"] is False
    assert verdict["worst_direction"] == "host 1 ingress"
    assert verdict["goodput_mbit"] == pytest.approx(70) and verdict["goodput_share"] == pytest.approx(0.7)
    assert verdict["busy_s"] == 4
    assert "host 1 ingress carried 70.0 of its 100 Mbit/s (70%)" in verdict["reason"]


def test_judge_compares_each_direction_with_its_own_rate():
    verdict = judge([busy_for(5, 19.8, 20), busy_for(5, 95, 100, host=1)])  # 99 % and 95 %
    assert verdict["faithful"] is True and verdict["nominal_mbit"] == 100 and verdict["goodput_share"] == pytest.approx(0.95)
    assert judge([busy_for(5, 0.999 * FAITHFUL_SHARE * 100, 100)])["faithful"] is False


def test_a_link_never_busy_long_enough_is_not_judged():
    verdict = judge([busy_for(0.9 * MIN_BUSY_S, 10, 100)])
    assert verdict["faithful"] is None and verdict["goodput_mbit"] is None
    assert "never the bottleneck long enough" in verdict["reason"]


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
                                 "directions": [busy_for(6, 52, 100), busy_for(6, 100, 100, host=1)]})
    link = link_section(run, {"network": {"name": "auto"}})
    assert (link["kind"], link["asked"], link["hosts"], link["faithful"]) == ("emulated", "auto", 2, False)
    assert link["nominal_mbit"] == 100 and link["goodput_mbit"] == pytest.approx(52) and link["busy_s"] == 6
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
