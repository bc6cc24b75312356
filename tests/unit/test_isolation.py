"""CPU isolation per peer (netemu/cpu.py, job/cpugroup.py) and time dilation (netemu/dilation.py).

Unit tier: the dilation rule on every composed strategy config, the emulate knobs' validation,
the fidelity check and the conversion back. Integration tier (real cgroups, skipped with the
reason where none can be written): a busy peer receives its quota, a straggler steps about
twice as slowly, groups are removed after every run, and the not-isolated path says so once.
"""
import json
import time

import pytest

from helpers import compose_config
from job.cpugroup import CpuGroup, PeerCpu
from job.errors import ConfigError
from launchers.config import group_options, validate
from metrics.summary.isolation import DISTORTION_LIMIT, isolation_section, undilate
from metrics.summary.network import network_section
from metrics.recording.rundir import RunDir
from netemu.dilation import checked_dilation, dilate

# Every time knob in conf/, found by reading the files (the rule must find each; a miss fails here).
TIME_KNOBS = {
    "progress_interval_s", "timeouts.collective_s", "timeouts.startup_s", "timeouts.shutdown_s", "fault.stall_s",
    "network.latency_ms",
}
STRATEGY_TIME_KNOBS = {
    "hivemind": {"hivemind.matchmaking_time", "hivemind.averaging_timeout", "hivemind.request_timeout",
                 "hivemind.finish_timeout_s"},
    "ps": {"ps.idle_timeout_s"},
    "ring": {"ring.cycle_time_ms"},
}
UNSCALED = ["peers", "peer_cpus", "batch_size", "max_steps", "lr", "eval_every", "fault.at_step", "sampler.interval",
            "emulate.period_us", "emulate.dilation", "target.value"]


def flat(config, prefix=""):
    out = {}
    for key, value in config.items():
        out |= flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value}
    return out


def as_dict(cfg):
    from omegaconf import OmegaConf

    return flat(OmegaConf.to_container(cfg, resolve=True))


@pytest.mark.parametrize("strategy", group_options("strategy"))
def test_dilation_scales_every_time_knob_of_every_strategy(strategy):
    cfg = compose_config(f"strategy={strategy}", "network=home", "network.latency_ms=5", "network.per_peer=[10,null]")
    before = as_dict(cfg)
    changed = dilate(cfg, 4)
    after = as_dict(cfg)
    for knob in TIME_KNOBS | STRATEGY_TIME_KNOBS.get(strategy, set()):
        assert after[knob] == pytest.approx(4 * before[knob]), knob
    assert after["network.bandwidth_mbit"] == pytest.approx(20 / 4)
    assert after["network.per_peer"] == [pytest.approx(2.5), None]
    for knob in UNSCALED:
        assert after[knob] == before[knob], knob
    assert set(changed) == TIME_KNOBS | STRATEGY_TIME_KNOBS.get(strategy, set()) | {
        "network.bandwidth_mbit", "network.per_peer"}


def test_a_new_time_knob_is_scaled_without_code_changes():
    cfg = compose_config("strategy=ps", "+ps.foo_s=3", "+ps.handshake_timeout=2", "+timeouts.extra_ms=7")
    dilate(cfg, 2)
    assert (cfg.ps.foo_s, cfg.ps.handshake_timeout, cfg.timeouts.extra_ms) == (6, 4, 14)


def emulation_entry(machine: dict, checked: dict, **more) -> dict:
    return {"results": [{"name": "emulation", "machine": machine, "measured_at": "2026-11-27 08:00:00",
                         "checked_dilation": checked, **more}]}


def test_dilation_is_offered_as_checked_on_this_machine_only(tmp_path):
    from metrics.recording.machine import fingerprint

    results = tmp_path / "results.json"
    here = fingerprint()
    results.write_text(json.dumps(emulation_entry(here, {"stepwise": 4, "hivemind": 1})))
    assert checked_dilation("stepwise", results)[0] == 4
    assert checked_dilation("hivemind", results)[0] == 1
    factor, why = checked_dilation("ps", results)
    assert factor == 1 and "ps was not among the strategies checked" in why
    other = here | {"cpu_model": "another model"}
    results.write_text(json.dumps(emulation_entry(other, {"stepwise": 4})))
    factor, why = checked_dilation("stepwise", results)
    assert factor == 1 and "checked on another machine" in why
    unknown = here | {"kernel": "unknown"}  # a fingerprint that did not record the kernel names no machine
    results.write_text(json.dumps(emulation_entry(unknown, {"stepwise": 4})))
    assert checked_dilation("stepwise", results)[0] == 1
    results.write_text(json.dumps(emulation_entry(here, {"stepwise": 4}, caveats={"invariance": "pinned to one core"})))
    factor, why = checked_dilation("stepwise", results)
    assert factor == 1 and "pinned to one core" in why
    assert checked_dilation("stepwise", tmp_path / "none.json")[0] == 1


def test_a_time_knob_interpolating_another_is_scaled_once():
    cfg = compose_config("+fault.other_s=${fault.stall_s}")
    dilate(cfg, 3)
    assert (cfg.fault.stall_s, cfg.fault.other_s) == (90, 90)


@pytest.mark.parametrize("overrides, message", [
    (["emulate.isolate=maybe"], "emulate.isolate must be one of auto, on, off, got maybe"),
    (["emulate.peer_cpu_share=[1,0.5,1]"], "emulate.peer_cpu_share has 3 entries, more than the run's 2 processes"),
    (["emulate.peer_cpu_share=[1,0]"], "emulate.peer_cpu_share[1] must be in (0, 1] (or null), got 0"),
    (["emulate.peer_cpu_share=[1.5]"], "emulate.peer_cpu_share[0] must be in (0, 1] (or null), got 1.5"),
    (["emulate.dilation=0.5"], "emulate.dilation must be >= 1, got 0.5"),
    (["emulate.dilation=2", "emulate.isolate=off", "emulate.allow_unchecked_dilation=true"],
     "emulate.dilation=2 needs CPU isolation, but emulate.isolate=off"),
    (["emulate.dilation=8"], "strategy stepwise is checked for emulate.dilation up to"),  # as conf/evidence.json says
    (["emulate.dilation=8"], "not 8; emulate.allow_unchecked_dilation=true runs it anyway"),
    (["emulate.peer_cpu_share=[0.05]", "emulate.period_us=10000"], "raise emulate.period_us"),
])
def test_bad_emulate_knobs_are_refused_before_launch(overrides, message):
    with pytest.raises(ConfigError) as raised:
        validate(compose_config("strategy=stepwise", "peers=2", *overrides))
    assert message in str(raised.value)


def write_run(tmp_path, cpu_figures: dict[int, dict], period_us=10000, hosts: dict[int, str] | None = None):
    run = RunDir(tmp_path)
    run.private.mkdir(parents=True)
    run.cpu_groups.write_text(json.dumps({"status": "isolated", "reason": None, "cgroup": "v1",
                                          "period_us": period_us, "ranks": {}}))
    return run, {rank: {"cpu": figures} | ({"host": hosts[rank]} if hosts else {})
                 for rank, figures in cpu_figures.items()}


def cpu(quota, received, runq, throttled=0, in_group=10.0, threads=1, other=None):
    return {"quota_cpus": quota, "threads": threads, "in_group_s": in_group, "cpu_received_s": received,
            "runq_s": runq, "throttled_periods": throttled, "throttled_s": 0.0} | (
        {} if other is None else {"other_on_cores_s": other})


def test_fidelity_check(tmp_path):
    run, results = write_run(tmp_path, {
        0: cpu(1.0, 9.9, 0.1),                  # got its core
        1: cpu(0.5, 5.0, 5.0, throttled=500),   # busy, throttled by its own quota: runq explained by throttling
        2: cpu(1.0, 3.0, 0.2),                  # idle much of the time (waiting for the network): little runq
        3: cpu(1.0, 4.8, 5.1),                  # busy on a shared core: half its promise, waiting the rest
        4: cpu(1.0, 3.7, 0.8, other=0.2),       # idle at times, its threads waiting for each other on its own core
        5: cpu(1.0, 4.8, 5.1, other=4.9),       # as rank 3, with the other work on its core measured
    }, hosts={0: "node-a", 1: "node-a", 2: "node-b", 3: "node-b", 4: "node-c", 5: "node-c"})
    section = isolation_section(run, results)
    assert section["faithful"] is False
    assert [r["received_share"] for r in section["by_rank"]] == pytest.approx([0.99, 1.0, 0.3, 0.48, 0.37, 0.48])
    assert [r["host"] for r in section["by_rank"]] == ["node-a", "node-a", "node-b", "node-b", "node-c", "node-c"]
    assert section["unfaithful"] == ["rank 3 on host node-b: received 48% of its promised CPU and waited 51% of its "
                                     "time in the run queue beyond its quota",
                                     "rank 5 on host node-c: received 48% of its promised CPU and waited 51% of its "
                                     "time in the run queue beyond its quota, while other work ran 4.9 s on its cores"]


def test_ranks_pinned_to_one_core_of_a_machine_that_fits_them_are_unfaithful(tmp_path):
    run = RunDir(tmp_path)
    run.private.mkdir(parents=True)
    results = {0: {"boot_id": "machine-a", "cores": [0]}, 1: {"boot_id": "machine-a", "cores": [0]},
               2: {"boot_id": "machine-b", "cores": [0]}}  # rank 2: core 0 of another machine
    section = isolation_section(run, results, fits=True)
    assert section["faithful"] is False
    assert section["unfaithful"] == ["ranks 0, 1 were pinned to the same core 0 of one machine though it had a "
                                     "core for each"]
    assert isolation_section(run, results, fits=False)["faithful"] is None  # oversubscribed: sharing is expected
    results[1]["cores"] = [1]
    assert isolation_section(run, results, fits=True)["faithful"] is None


def ps_on_two_cores(tmp_path, foreign_s: float):
    """A parameter server's run on a 2-core machine as its shape places it: worker 0 and the server pinned to core 0,
    worker 1 to core 1, `foreign_s` seconds of work outside the run on each core; the server waits 6 % of its time
    beyond its quota."""
    figures = {0: cpu(1.0, 201.6, 25.9, throttled=3690, in_group=513.0, other=52.8 + foreign_s),
               1: cpu(1.0, 210.1, 13.6, throttled=6090, in_group=526.5, other=foreign_s),
               2: cpu(1.0, 52.8, 35.0, throttled=602, in_group=513.0, other=201.6 + foreign_s)}
    run, results = write_run(tmp_path / f"foreign-{foreign_s:g}", figures, hosts={0: "h0", 1: "h1", 2: "h2"})
    for rank, core in ((0, 0), (1, 1), (2, 0)):
        results[rank] |= {"boot_id": "machine-a", "cores": [core]}
    return isolation_section(run, results, fits=False)


def test_a_rank_the_runs_shape_pins_beside_another_is_not_other_work(tmp_path):
    """The server waits for worker 0's core as its configuration shares it: the run holds its setting. Work from
    outside the run on that core still makes it unfaithful, counted without the worker's time."""
    section = ps_on_two_cores(tmp_path, foreign_s=19.0)
    assert [r["run_on_cores_s"] for r in section["by_rank"]] == pytest.approx([52.8, 0.0, 201.6])
    assert section["faithful"] is True
    crowded = ps_on_two_cores(tmp_path, foreign_s=40.0)
    assert crowded["unfaithful"] == ["rank 2 on host h2: received 10% of its promised CPU and waited 6% of its time in "
                                     "the run queue beyond its quota, while other work ran 40.0 s on its cores"]


ALONE_S = 2.0  # a synchronous step's span where every peer has a core to itself


def synchronous_steps(lost_s: dict[int, list[float]], alone_s: float = ALONE_S,
                      compute_s: float = 0.5) -> dict[int, list[dict]]:
    """Per rank, steps of a synchronous run in which every rank waits for the slowest: step i lasts alone_s plus the
    longest time any rank's training thread waited for a CPU held by other work in it (lost_s[rank][i])."""
    count = len(next(iter(lost_s.values())))
    spans = [alone_s + max(waits[i] for waits in lost_s.values()) for i in range(count)]
    return {rank: [{"step": i + 1, "data_s": 0.0, "compute_s": compute_s + waits[i], "opt_s": 0.0,
                    "comm_s": spans[i] - compute_s - waits[i], "wait_s": 0.0, "lost_to_sharing_s": waits[i]}
                   for i in range(count)]
            for rank, waits in lost_s.items()}


def moved(steps: dict[int, list[dict]], alone_s: float = ALONE_S) -> float:
    """How far the step moved from alone_s: the synthetic truth."""
    spans = [s["compute_s"] + s["comm_s"] for s in steps[0]]
    return sum(spans) / len(spans) / alone_s - 1


def judged(tmp_path, steps: dict[int, list[dict]], figures: dict[int, dict] | None = None) -> dict:
    run, results = write_run(tmp_path, figures or {rank: cpu(1.0, 9.9, 0.1) for rank in steps},
                             hosts={rank: f"h{rank}" for rank in steps})
    return isolation_section(run, results, fits=False, steps_by_rank=steps)


def test_peers_starved_by_the_cpu_rule_whose_step_did_not_move_are_faithful(tmp_path):
    """8 peers on 2 cores, wire-bound: each received a quarter of its promised CPU and waited most of its time in
    the run queue while other processes (the run's own ranks) ran on its core, yet its compute (0.1 s of a 60 s
    step) waited 0.3 s a step: the step moved by 0.5 %, within the limit. Ranks with steps are judged by distortion,
    not by the CPU rule that would mark each of them."""
    steps = synchronous_steps({rank: [0.3] * 6 for rank in range(8)}, alone_s=60.0, compute_s=0.1)
    figures = {rank: cpu(1.0, 90.0, 250.0, in_group=360.0, other=270.0) for rank in range(8)}
    section = judged(tmp_path, steps, figures)
    assert moved(steps, alone_s=60.0) == pytest.approx(0.005)
    assert section["distortion"] == pytest.approx(0.005) and section["distortion_within_limit"] is True
    assert section["faithful"] is True and section["unfaithful"] == []


@pytest.mark.parametrize("move, within", [(0.12, False), (0.105, False), (0.02, True), (0.015, True)])
def test_a_step_moved_by_10_percent_or_more_is_beyond_the_limit_and_by_2_percent_or_less_within(tmp_path, move,
                                                                                                within):
    """3 ranks take turns waiting for a CPU held by other work, each wait delaying the whole synchronous step: the
    step moves by `move`, while each rank alone lost a third of that. Every rank received its CPU, yet a step moved
    beyond the limit makes the run unfaithful."""
    wait = move * ALONE_S
    steps = synchronous_steps({rank: [wait if i % 3 == rank else 0.0 for i in range(9)] for rank in range(3)})
    assert moved(steps) == pytest.approx(move)
    section = judged(tmp_path, steps)
    assert section["distortion"] == pytest.approx(move)  # synchronous steps: the bound is the move itself
    assert section["distortion_within_limit"] is within, section
    assert section["faithful"] is within, section["unfaithful"]


def test_a_run_moved_beyond_the_limit_is_unfaithful_though_every_rank_received_its_cpu(tmp_path):
    """Rank 1 lost 0.3 s of each 2 s step to other work, rank 2 0.1 s: the synchronous step moved by 15 % while every
    rank received its CPU (the CPU rule would pass it). The mark names the figure, the limit and rank 1."""
    steps = synchronous_steps({0: [0.0] * 4, 1: [0.3] * 4, 2: [0.1] * 4})
    section = judged(tmp_path, steps)
    assert section["distortion"] == pytest.approx(0.15) and section["faithful"] is False
    assert section["unfaithful"] == [f"sharing moved the step by 15.0% (distortion), beyond the limit of "
                                     f"{DISTORTION_LIMIT:.1%}; rank 1 on host h1 lost the most, 15.0%"]


def test_a_rank_without_steps_is_judged_by_the_cpu_rule_and_the_workers_by_distortion(tmp_path):
    """ps: the workers record steps, the server (rank 2) none. Every rank received half its CPU and waited while
    other work ran on its cores; the workers' steps hardly moved, so the server alone is marked."""
    steps = synchronous_steps({0: [0.01] * 4, 1: [0.01] * 4})
    run, results = write_run(tmp_path, {rank: cpu(1.0, 4.8, 5.1, other=4.9) for rank in range(3)},
                             hosts={0: "h0", 1: "h1", 2: "h2"})
    section = isolation_section(run, results, fits=False, steps_by_rank=steps)
    assert section["distortion"] == pytest.approx(0.005) and section["faithful"] is False
    assert section["unfaithful"] == ["rank 2 on host h2: received 48% of its promised CPU and waited 51% of its "
                                     "time in the run queue beyond its quota, while other work ran 4.9 s on its cores"]


def test_ranks_sharing_a_core_are_objected_to_only_where_no_step_was_judged(tmp_path):
    """Two ranks pinned to one core of a machine that fits them: where their steps were judged, distortion counts
    what the sharing did (here little); without steps, the sharing itself is the objection."""
    steps = synchronous_steps({0: [0.01] * 4, 1: [0.01] * 4})
    run, results = write_run(tmp_path, {rank: cpu(1.0, 9.9, 0.1) for rank in steps}, hosts={0: "h0", 1: "h1"})
    for result in results.values():
        result |= {"boot_id": "machine-a", "cores": [0]}
    section = isolation_section(run, results, fits=True, steps_by_rank=steps)
    assert (section["faithful"], section["unfaithful"]) == (True, [])
    assert isolation_section(run, results, fits=True)["unfaithful"] == [
        "ranks 0, 1 were pinned to the same core 0 of one machine though it had a core for each"]


def skewed_steps(lost_s: float, spare_s: float, after: bool = False, count: int = 4) -> dict[int, list[dict]]:
    """A synchronous 2-rank step: each rank reaches its last gradient after 0.5 s, rank 1 `spare_s` later than rank 0
    (its compute is slower), then 1 s of all-reduce that starts when both have; rank 0 loses `lost_s` to other work
    before its last gradient (`after`: after it, so its step ends that much later)."""
    reach = (0.5 + (0.0 if after else lost_s), 0.5 + spare_s)
    span = 1.0 + max(reach) + (lost_s if after else 0.0)
    return {rank: [{"step": i + 1, "data_s": 0.0, "compute_s": reach[rank], "opt_s": 0.0, "wait_s": 0.0,
                    "comm_s": span - reach[rank], "lost_to_sharing_s": lost_s if rank == 0 else 0.0,
                    "lost_after_gradient_s": lost_s if rank == 0 and after else 0.0} for i in range(count)]
            for rank in (0, 1)}


@pytest.mark.parametrize("lost_s, spare_s, after, moved", [
    (0.1, 0.15, False, 0.0),  # rank 1 reached the all-reduce later anyway: the loss moved nothing
    (0.3, 0.15, False, 0.15 / 1.65),  # 1.8 s against the 1.65 s it would have taken
    (0.1, 0.15, True, 0.1 / 1.65)])  # lost after its last gradient: its step ended later
def test_a_loss_that_another_rank_had_time_to_spare_for_does_not_move_a_synchronous_step(tmp_path, lost_s, spare_s,
                                                                                         after, moved):
    steps = skewed_steps(lost_s, spare_s, after)
    assert judged(tmp_path, steps)["distortion"] == pytest.approx(moved)


def test_a_loss_in_an_asynchronous_run_or_one_recorded_without_its_split_counts_whole(tmp_path):
    """Without lockstep no rank waits for another, so time to spare absorbs nothing; a record from before the loss
    after the last gradient was kept is read as all after it: the figure is never below the truth."""
    steps = skewed_steps(0.1, 0.15)
    run, results = write_run(tmp_path, {rank: cpu(1.0, 9.9, 0.1) for rank in steps}, hosts={0: "h0", 1: "h1"})
    assert isolation_section(run, results, fits=False, steps_by_rank=steps,
                             synchronous=False)["distortion"] == pytest.approx(0.1 / 1.55)
    for record in steps[0]:
        del record["lost_after_gradient_s"]
    assert judged(tmp_path / "old", steps)["distortion"] == pytest.approx(0.1 / 1.55)


@pytest.mark.parametrize("overrides, lockstep", [(("strategy=allreduce",), True), (("strategy=ps",), True),
                                                (("strategy=ps", "ps.mode=async"), False), (("strategy=hivemind",), False)])
def test_only_a_run_whose_workers_wait_for_each_other_lets_time_to_spare_absorb_a_loss(overrides, lockstep):
    from helpers import compose_config, strategy_of

    cfg = compose_config(*overrides)
    assert strategy_of(cfg.strategy.name).lockstep(cfg) is lockstep


def test_a_straggler_waiting_for_its_own_quota_is_within_the_limit_and_other_work_is_not(tmp_path):
    """A peer under a quota of half a core, throttled half its time, waits for its own quota: that is the setting
    emulated, not distortion; the same waits without throttling (other work held the core) are."""
    steps = synchronous_steps({0: [0.0] * 4, 1: [1.5] * 4})
    quota = {0: cpu(1.0, 9.9, 0.1), 1: cpu(0.5, 5.0, 5.0, throttled=500) | {"throttled_s": 5.0}}
    assert judged(tmp_path / "quota", steps, quota)["distortion_within_limit"] is True
    assert judged(tmp_path / "other", steps)["distortion_within_limit"] is False


def test_a_run_that_recorded_no_waits_is_not_judged(tmp_path):
    steps = synchronous_steps({0: [0.0, 0.0]})
    for s in steps[0]:
        del s["lost_to_sharing_s"]
    section = judged(tmp_path, steps)
    assert (section["distortion"], section["distortion_within_limit"]) == (None, None)


def test_a_peer_outside_its_cpu_group_makes_the_run_unfaithful(tmp_path):
    run, results = write_run(tmp_path, {0: cpu(1.0, 9.9, 0.1),
                                        1: {"in_group_s": 10.0, "runq_s": 0.1, "error": "could not join its cpu "
                                            "group: /sys/fs/cgroup/cpu/avgbench-x/rank1 is not visible"}},
                             hosts={0: "h0", 1: "h1"})
    section = isolation_section(run, results)
    assert section["faithful"] is False
    assert section["unfaithful"] == ["rank 1 on host h1 ran outside its CPU group: could not join its cpu group: "
                                     "/sys/fs/cgroup/cpu/avgbench-x/rank1 is not visible"]


def test_a_recorded_group_this_process_cannot_see_is_an_error_not_a_silent_none(tmp_path):
    run = RunDir(tmp_path)
    run.private.mkdir(parents=True)
    hidden = str(tmp_path / "no-such-cgroup" / "rank0")
    run.cpu_groups.write_text(json.dumps({"status": "isolated", "ranks": {"0": {
        "version": "v1", "dirs": [hidden], "parents": [str(tmp_path / "no-such-cgroup")], "quota_cpus": 1.0,
        "period_us": 10000, "threads": 1}}}))
    with pytest.raises(FileNotFoundError, match="is not visible"):
        CpuGroup.of_rank(run, 0)
    assert CpuGroup.of_rank(run, 1) is None  # a rank of another host: not this process's business
    peer = PeerCpu(run, 0)
    assert peer.group is None and peer.error.startswith("could not join its cpu group: ")
    assert peer.figures()["error"] == peer.error


def not_isolated_run(tmp_path) -> RunDir:
    run = RunDir(tmp_path)
    run.private.mkdir(parents=True)
    run.cpu_groups.write_text(json.dumps({"status": "not isolated", "reason": "emulate.isolate=off", "cgroup": None,
                                          "period_us": 10000, "ranks": {}}))
    return run


def test_not_isolated_run_without_steps_has_no_fidelity_verdict(tmp_path):
    section = isolation_section(not_isolated_run(tmp_path), {0: {"cpu": {"in_group_s": 3.0, "runq_s": 0.1}}})
    assert (section["status"], section["faithful"], section["by_rank"][0]["runq_s"]) == ("not isolated", None, 0.1)


def test_a_not_isolated_run_with_steps_is_judged_by_distortion(tmp_path):
    run = not_isolated_run(tmp_path)
    results = {rank: {"cpu": {"in_group_s": 10.0, "runq_s": 0.1}, "host": f"h{rank}"} for rank in (0, 1)}
    within = isolation_section(run, results, steps_by_rank=synchronous_steps({0: [0.01] * 4, 1: [0.0] * 4}))
    assert (within["status"], within["faithful"]) == ("not isolated", True)
    beyond = isolation_section(run, results, steps_by_rank=synchronous_steps({0: [0.3] * 4, 1: [0.0] * 4}))
    assert beyond["faithful"] is False and "rank 0 on host h0 lost the most, 15.0%" in beyond["unfaithful"][0]


def test_undilate_converts_times_back():
    """Every figure whose name says seconds (at any depth) / k, every rate x k; instants, shares, bytes, the
    config as asked and the real machine's CPU accounting stay."""
    summary = {"wall_s": 40.0, "started_at": 1000.0, "time_breakdown_s": {"compute_s": 2.0, "comm_s": None},
               "time_breakdown_share": {"compute_s": 0.5}, "time_to_target_s": 8.0,
               "time_to_target_by_rank": {0: 8.0, 1: None}, "samples_to_target": 64.0, "time_per_sample_s": 0.125,
               "hidden_comm_s": 0.4, "startup_wait_s": 2.0, "throughput_samples_per_s": 10.0,
               "bytes_sent_per_step": 100.0, "evaluation": {"after_training_s": 4.0, "interval_steps": 5},
               "averaging_rounds": {"rounds": [{"started_at": 1001.0, "duration_s": 0.8, "group_size": 2}]},
               "peers": [{"train_s": 20.0, "wall_s_per_step": 0.2, "cpu_s_per_step": 0.16, "runq_s_per_step": 0.04,
                          "steps": 100, "result": {"strategy": {"averaging_s": 1.2, "allreduce_ns": 4000},
                                                   "cpu": {"in_group_s": 30.0, "cpu_received_s": 7.5}}}],
               "network": {"bandwidth_mbit_by_rank": [5.0, None], "latency_ms": 20.0,
                           "efficiency": {"floor_s": 0.8, "measured_s_per_round": 1.0, "efficiency": 0.8,
                                          "throughput_bound_samples_per_s": 50.0}},
               "strategy_knobs": {"matchmaking_time": 20.0, "target_batch_size": 64},
               "isolation": {"by_rank": [{"in_group_s": 30.0, "runq_s": 1.0}]},
               "machine": {"sampled_s": 41.0}, "config": {"timeouts": {"collective_s": 60}}}
    back = undilate(summary, 4)
    assert back["wall_s"] == 10 and back["time_breakdown_s"] == {"compute_s": 0.5, "comm_s": None}
    assert back["time_to_target_s"] == 2 and back["time_to_target_by_rank"] == {0: 2.0, 1: None}
    assert (back["time_per_sample_s"], back["hidden_comm_s"], back["startup_wait_s"]) == (0.03125, 0.1, 0.5)
    assert back["throughput_samples_per_s"] == 40 and back["evaluation"]["after_training_s"] == 1
    peer = back["peers"][0]
    assert (peer["train_s"], peer["wall_s_per_step"], peer["cpu_s_per_step"], peer["runq_s_per_step"]) == (
        5, 0.05, 0.04, 0.01)
    assert peer["result"]["strategy"] == {"averaging_s": 0.3, "allreduce_ns": 1000}
    assert back["averaging_rounds"]["rounds"] == [{"started_at": 1001.0, "duration_s": 0.2, "group_size": 2}]
    assert back["network"]["bandwidth_mbit_by_rank"] == [20.0, None] and back["network"]["latency_ms"] == 5
    assert back["network"]["efficiency"] == {"floor_s": 0.2, "measured_s_per_round": 0.25, "efficiency": 0.8,
                                             "throughput_bound_samples_per_s": 200.0}
    assert back["strategy_knobs"] == {"matchmaking_time": 5.0, "target_batch_size": 64}
    unchanged = ("started_at", "time_breakdown_share", "samples_to_target", "bytes_sent_per_step", "isolation",
                 "machine", "config")
    assert {key: back[key] for key in unchanged} == {key: summary[key] for key in unchanged}
    assert peer["steps"] == 100 and back["evaluation"]["interval_steps"] == 5
    assert peer["result"]["cpu"] == {"in_group_s": 30.0, "cpu_received_s": 7.5}


def test_a_dilated_links_rate_and_latency_are_reported_as_asked(tmp_path):
    """The network section reads the links as built (rate / k, latency x k), so converting back gives what the
    config asked for, not latency / k."""
    run = RunDir(tmp_path)
    run.private.mkdir(parents=True)
    run.network.write_text(json.dumps({"hosts": [{"index": i, "bandwidth_mbit": 5.0, "latency_ms": 20.0}
                                                 for i in range(2)]}))
    asked = {"network": {"name": "emulated", "bandwidth_mbit": 20, "latency_ms": 5}}
    network = undilate({"network": network_section(run, asked)}, 4)["network"]
    assert (network["bandwidth_mbit_by_rank"], network["latency_ms"]) == ([20.0, 20.0], 5.0)


def test_interrupts_on_a_peers_cores_are_shown_and_not_judged(tmp_path):
    """This kernel's accounting cannot split the cores' interrupt time between the peer's own usage and the idle
    core: the row shows it; the judgement stays on other_on_cores_s."""
    run, results = write_run(tmp_path, {0: cpu(1.0, 4.8, 5.1, other=4.9) | {"irq_on_cores_s": 4.5}}, hosts={0: "h0"})
    section = isolation_section(run, results)
    assert section["by_rank"][0]["irq_on_cores_s"] == 4.5
    assert section["faithful"] is False and "while other work ran 4.9 s" in section["unfaithful"][0]


def fake_cpuacct(tmp_path):
    """A run whose rank 0 has a v1 group under a cpuacct root of files, and account(root_ns, group_ns, usage_s)
    that sets the per-core CPU time of every task and of the group, and the group's total."""
    root = tmp_path / "cpuacct"
    group = root / "avgbench-x" / "rank0"
    group.mkdir(parents=True)

    def account(root_ns, group_ns, usage_s):
        (root / "cpuacct.usage_percpu").write_text(" ".join(str(int(ns)) for ns in root_ns) + " \n")
        (group / "cpuacct.usage_percpu").write_text(" ".join(str(int(ns)) for ns in group_ns) + " \n")
        (group / "cpuacct.usage").write_text(str(int(usage_s * 1e9)))
        (group / "cpu.stat").write_text("nr_periods 0\nnr_throttled 0\nthrottled_time 0\n")

    run = RunDir(tmp_path / "run")
    run.private.mkdir(parents=True)
    run.cpu_groups.write_text(json.dumps({"status": "isolated", "ranks": {"0": {
        "version": "v1", "dirs": [str(group)], "parents": [str(root / "avgbench-x")], "quota_cpus": 1.0,
        "period_us": 10000, "threads": 1, "enforced": False}}}))
    return run, account


def test_other_work_is_other_tasks_time_on_the_peers_cores(tmp_path):
    """other_on_cores_s = every task's time on the peer's cores (the cpuacct root's per-core accounting) less the
    peer group's there: work on a core the peer was not pinned to does not count, and neither does anything
    /proc/stat's busy ticks hold (idle-time interrupts) that no task's time does."""
    run, account = fake_cpuacct(tmp_path)
    account([50e9, 70e9], [1e9, 2e9], 3)
    peer = PeerCpu(run, 0)
    peer.pinned([1])
    # 10 s on core 0 by others; on core 1 the peer ran 2 s and everything together 3 s: 1 s of other tasks
    account([60e9, 73e9], [1e9, 4e9], 5)
    figures = peer.figures()
    assert figures["other_on_cores_s"] == pytest.approx(1.0)
    assert figures["cpu_received_s"] == pytest.approx(2.0)
    assert figures["cores"] == [1]


def test_an_evaluation_set_aside_in_a_pause_is_left_out_of_the_peers_cpu_figures(tmp_path):
    """A span set aside (an evaluation in training's pause, maybe on another peer's core too) leaves the peer's time,
    CPU received and other work on its cores as they were before it; what comes after counts again."""
    run, account = fake_cpuacct(tmp_path)
    account([0, 0], [0, 0], 0)
    peer = PeerCpu(run, 0)
    peer.pinned([1])
    account([0, 2e9], [0, 2e9], 2)  # training: 2 s of the peer's own
    with peer.set_aside():
        time.sleep(2.0)
        account([0, 9e9], [0, 5e9], 5)  # the evaluation: 3 s of its own, 4 s of another peer's on its core
    account([0, 10e9], [0, 6e9], 6)  # training again: 1 s of its own
    figures = peer.figures()
    assert figures["cpu_received_s"] == pytest.approx(3.0)
    assert figures["other_on_cores_s"] == pytest.approx(0.0)
    assert figures["in_group_s"] < 1.0  # the 2 s set aside is not the peer's time in its group


def test_the_fidelity_plan_runs_every_load_once_per_block_in_its_own_order_starting_on_or_off_as_drawn():
    from bench.emulation import DUTIES, FIDELITY_BLOCKS, LOADS, fidelity_plan

    plan = fidelity_plan(FIDELITY_BLOCKS)
    loaded = sorted((load, duty) for load in LOADS for duty in DUTIES)
    assert sum(len(block) for block in plan) == 30  # the declared sample of judged runs
    for block in plan:
        assert sorted((load, duty) for load, duty, _ in block) == loaded
    assert len({tuple(block) for block in plan}) == FIDELITY_BLOCKS  # each block its own order
    assert {starts_on for block in plan for *_, starts_on in block} == {True, False}
    assert fidelity_plan(FIDELITY_BLOCKS) == plan  # drawn from seeds: a resumed measurement plans the same runs


def toggled_step(step, ended_at, span, lost=0.0):
    """A steps.jsonl record: `span` seconds of compute ending at `ended_at`, `lost` of it to sharing after its last
    gradient."""
    return {"step": step, "ended_at": ended_at, "data_s": 0.0, "compute_s": span, "comm_s": 0.0, "opt_s": 0.0,
            "wait_s": 0.0, "compute_wait_s": 0.0, "lost_to_sharing_s": lost, "lost_after_gradient_s": lost}


def test_the_fidelity_harness_classes_each_step_by_the_load_segment_it_lies_wholly_within(monkeypatch):
    """The load switches every 10 s from t = 1000: on over [1000, 1010), off over [1010, 1020), on again from 1020. A
    step one rank ran across a switch is neither."""
    import bench.emulation as emulation
    from metrics.summary.isolation import lost_by_step

    monkeypatch.setattr(emulation, "SEGMENT_S", 10.0)
    steps = {0: [toggled_step(1, 1004.0, 2.0), toggled_step(2, 1013.0, 2.0), toggled_step(3, 1011.0, 2.0),
                 toggled_step(4, 1025.0, 2.0), toggled_step(5, 1009.5, 2.0), toggled_step(6, 1001.0, 0.5)],
             1: [toggled_step(1, 1004.0, 2.5), toggled_step(2, 1013.0, 2.5), toggled_step(3, 1011.0, 1.5),
                 toggled_step(4, 1025.0, 2.0), toggled_step(5, 1009.5, 2.0), toggled_step(6, 1001.0, 0.5)]}
    lost = {rank: lost_by_step(by_rank, 0.0) for rank, by_rank in steps.items()}
    # step 3: rank 0 ran 1009-1011 (across the switch at 1010), rank 1 1009.5-1011; step 5 ended before it
    assert emulation.load_states(steps, lost, 1000.0, True) == {1: True, 2: False, 3: None, 4: True, 5: True, 6: True}
    assert emulation.load_states(steps, lost, 1000.0, False) == {1: False, 2: True, 3: None, 4: False, 5: False, 6: False}
    # started at 1003: steps 1 and 6 began before the load, step 2 (1011-1013) ends at its first switch
    assert emulation.load_states(steps, lost, 1003.0, True) == {1: None, 2: None, 3: True, 4: True, 5: True, 6: None}


def test_the_fidelity_truth_is_the_loaded_steps_mean_span_over_the_unloaded_less_1_without_crossing_steps(monkeypatch):
    """Loaded steps last 2.2 s (rank 0 2.3 s, rank 1 2.1 s), unloaded ones 2.0 s: the truth is 0.10. Rank 0 lost 0.2 s
    of each loaded step after its last gradient: its figure is 0.2 / (2.2 - 0.2) = 0.10; the unloaded steps lost
    nothing. A 5 s step across the switch at 10 s (it lost 3 s) is left out."""
    import bench.emulation as emulation

    monkeypatch.setattr(emulation, "SEGMENT_S", 10.0)
    on = [(1, 4.0), (2, 8.0), (6, 24.0), (7, 28.0)]  # (step, end): on over [0, 10) and [20, 30), off over [10, 20)
    off = [(4, 15.0), (5, 19.0), (8, 35.0), (9, 39.0)]  # and [30, 40)
    steps = {0: [toggled_step(step, end, 2.3, 0.2) for step, end in on] + [toggled_step(3, 12.0, 5.0, 3.0)]
             + [toggled_step(step, end, 2.0) for step, end in off],
             1: [toggled_step(step, end, 2.1) for step, end in on] + [toggled_step(3, 12.0, 5.0)]
             + [toggled_step(step, end, 2.0) for step, end in off]}
    found = emulation.toggled_figures(steps, {0: 0.0, 1: 0.0}, 0.0, True)
    assert (found["loaded_steps"], found["unloaded_steps"], found["crossing_steps"]) == (4, 4, 1)
    assert found["loaded_step_s"] == pytest.approx(2.2)
    assert found["unloaded_step_s"] == pytest.approx(2.0)
    assert found["moved"] == pytest.approx(0.10)
    assert found["distortion"] == pytest.approx(0.10)
    assert found["background"] == pytest.approx(0.0)


def test_the_fidelity_measurement_resumes_its_own_log_and_refuses_another_plans(tmp_path, monkeypatch):
    import bench.emulation as emulation

    monkeypatch.setattr(emulation, "RESULTS", tmp_path)
    log = tmp_path / "emulation_fidelity_toggled.jsonl"
    runs = [(block, *run) for block, order in enumerate(emulation.fidelity_plan(2)) for run in order]
    done = []

    def toggled_run(load, duty, starts_on, block):
        done.append((block, load, duty, starts_on))
        return {"block": block, "load": load, "duty": duty, "starts_on": starts_on, "moved": duty, "distortion": duty}

    monkeypatch.setattr(emulation, "toggled_run", toggled_run)
    log.write_text("".join(json.dumps(toggled_run(*run[1:], run[0])) + "\n" for run in runs[:4]))
    done.clear()
    result = emulation.fidelity(2)
    assert done == runs[4:]  # the rest, in the plan's order
    assert [(r["block"], r["load"], r["duty"], r["starts_on"]) for r in result["runs"]] == runs
    assert len(log.read_text().splitlines()) == len(runs)

    old = {"block": 0, "load": "alone", "duty": 0.0, "step_s": 2.0, "distortion": 0.02}  # the sandwich design's
    flipped = toggled_run(runs[0][1], runs[0][2], not runs[0][3], 0)  # the first run starting the other way
    for foreign in (old, flipped):
        log.write_text(json.dumps(foreign) + "\n")
        done.clear()
        with pytest.raises(SystemExit, match="another plan"):
            emulation.fidelity(2)
        assert not done


def test_the_fidelity_error_rates_count_false_passes_and_false_flags_against_each_runs_true_move():
    from bench.emulation import chosen_limit, error_rates

    def run(moved, distortion):
        return {"block": 0, "load": "spin", "duty": 0.02, "moved": moved, "distortion": distortion}

    rates = error_rates([run(0.12, 0.045), run(0.01, 0.035), run(0.105, 0.2), run(0.0, None), run(0.05, 0.3)])
    assert (rates["0.04"]["false_pass"]["events"], rates["0.04"]["false_pass"]["runs"]) == (0, 2)
    assert (rates["0.05"]["false_pass"]["events"], rates["0.05"]["false_pass"]["runs"]) == (1, 2)
    assert (rates["0.03"]["false_flag"]["events"], rates["0.03"]["false_flag"]["runs"]) == (1, 2)
    assert (rates["0.04"]["false_flag"]["events"], rates["0.04"]["false_flag"]["runs"]) == (0, 2)
    assert rates["0.04"]["false_flag"]["upper_95"] == pytest.approx(1 - 0.05 ** (1 / 2))  # none of 2: Clopper-Pearson
    assert chosen_limit(rates) == 0.04


def test_the_deciding_limit_is_the_one_the_recorded_fidelity_check_chose_and_met():
    from bench.results import load
    entry = load("emulation_fidelity").json()
    assert entry["goal_met"] and entry["chosen_limit"] == DISTORTION_LIMIT
