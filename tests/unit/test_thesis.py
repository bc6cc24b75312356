"""bench/thesis.py without running it: the families chosen, the full grid it would run, and the projected
remainder built from a hand-made slice."""
import pytest

from bench.thesis import STALE, chosen, configurations, families, family_overrides, judged, merge, projected_rows, \
    slice_runs, UNPLACED
from helpers import validation_case, write_results, write_run
from metrics.projection.evidence import load_evidence
from metrics.projection.link import Link

HIVEMIND = {"matchmaking_time": 2.0, "target_batch_size": 625, "use_local_updates": False,
            "delay_state_averaging": True, "average_state_every": 1}
ONE_MB_PER_S = Link("test", 10.0, 0.0, "test")  # 10 Mbit/s x the payload share 0.8: 1 MB/s of payload


def test_families_chosen_by_name():
    plan = families(2)
    assert list(chosen(plan, "")) == ["hivemind", "strategies"]
    assert chosen(plan, "hivemind") == {"hivemind": plan["hivemind"]}
    assert list(chosen(plan, " strategies,hivemind ")) == ["hivemind", "strategies"]  # the plan's order
    with pytest.raises(ValueError, match="unknown family batch"):  # the batch family is the full grid's only
        chosen(plan, "hivemind,batch")


def test_the_family_overrides_come_after_the_job():
    # Hydra keeps the last value of a key: the batch family's batch sizes must follow the job's batch_size=32
    command = family_overrides(families(16)["batch"])
    assert command.index("batch_size=32,64,128") > command.index("batch_size=32")


def test_full_grid_configurations():
    full = families(16)
    # the family's batch sizes win over the job's batch_size=32 (the last value of a key is Hydra's)
    batch = configurations(full["batch"])
    assert sorted((c["batch_size"], c["knobs"]["use_local_updates"]) for c in batch) == \
        [(32, False), (32, True), (64, False), (64, True), (128, False), (128, True)]
    assert {(c["strategy"], c["peers"], c["peer_cpus"], c["knobs"]["target_batch_size"]) for c in batch} == \
        {("hivemind", 8, 2, 2500)}
    others = configurations(full["strategies"])
    assert sorted(c["strategy"] for c in others) == ["allreduce", "ps", "ring", "stepwise"]
    assert {(c["peers"], c["peer_cpus"], c["batch_size"]) for c in others} == {(8, 2, 32)}


def write_slice(sweeps) -> None:
    """The slice as its sweeps leave it: hivemind 2 x 1 with gradients (two blocks: compute 0.5 and 0.7 s per step)
    and with local updates (0.7 s), 1 MB averaged per round; the one-process baseline on 2 vCPUs (batch 64, 0.8 s
    per step); the one-peer baseline on 1 vCPU and a failed run, neither of which may count."""
    def run(name, target, knobs, workers, payload, compute, config, launch=None, summary=None):
        write_run(sweeps / name, target, knobs, workers, payload, None, [1.0, 2.0, 3.0],
                  summary={"status": "completed", "strategy_knobs": knobs} | (summary or {}),
                  step={"compute_s": compute - 0.01}, config=config, launch=launch)

    hivemind, single = "strategies.hivemind:Hivemind", "strategies.single:Single"
    slice_shape = {"peers": 2, "peer_cpus": 1, "batch_size": 32}
    run("hivemind/block0/gradients", hivemind, HIVEMIND, 2, 1_000_000, 0.5, slice_shape)
    run("hivemind/block1/gradients", hivemind, HIVEMIND, 2, 1_000_000, 0.7, slice_shape)
    run("hivemind/block0/local", hivemind, HIVEMIND | {"use_local_updates": True}, 2, 1_000_000, 0.7, slice_shape)
    run("hivemind/block1/failed", hivemind, HIVEMIND, 2, 1_000_000, 9.0, slice_shape, summary={"status": "failed"})
    baseline = {"is_baseline": True}
    run("hivemind/block0/baseline_2x1", single, {}, 1, 0, 0.8, slice_shape, {"batch_size": 64, "threads": 2}, baseline)
    run("hivemind/block0/baseline_1x1", single, {}, 1, 0, 5.0, slice_shape | {"peers": 1}, None, baseline)


def evidence_of(path, *rows):
    """The payload share 0.8 and these validation rows, as the projection reads them."""
    return load_evidence(write_results(path, list(rows), 0.8))


def validated_hivemind(path):
    """hivemind's held-out errors +10 % (N=4) and -20 % and 0 % (N=16, at wire/compute 0.1 and 0.5) at 10 Mbit/s,
    within its ±25 % goal; none for ps."""
    return evidence_of(path, validation_case("hivemind", 4, 0.1, link_mbit=10),
                       validation_case("hivemind", 16, -0.2, link_mbit=10, wire_over_compute=0.1),
                       validation_case("hivemind", 16, 0.0, link_mbit=10, wire_over_compute=0.5))


def configuration(strategy: str, peers: int, cpus: int, knobs: dict) -> dict:
    return {"overrides": [f"peers={peers}"], "strategy": strategy, "peers": peers, "peer_cpus": cpus,
            "batch_size": 32, "knobs": knobs, "family": "test"}


def test_projected_remainder_from_the_slice(tmp_path):
    write_slice(tmp_path)
    evidence = validated_hivemind(tmp_path / "results.json")
    grid = [configuration("hivemind", 16, 1, HIVEMIND | {"target_batch_size": 10000}),
            configuration("hivemind", 8, 2, HIVEMIND | {"use_local_updates": True}),
            configuration("hivemind", 4, 4, HIVEMIND),
            configuration("ps", 8, 2, {"servers": 1, "mode": "sync"})]
    rows = projected_rows(grid, slice_runs([tmp_path / "hivemind"], 0.8), ONE_MB_PER_S, 2, evidence)
    sixteen, eight, four, ps, *baselines = rows
    # a row with a number is projected; those refused (4 x 4: thread scaling; ps: no slice run; the baselines) are not
    assert [r["projected"] for r in (sixteen, eight, four, ps)] == [True, True, False, False]
    assert baselines and all(not r["projected"] and r["step_s"] is None and r["not_projected"] for r in baselines)

    # 16 x 1, gradients, target 10000: a 1-vCPU peer's compute from the 2 x 1 gradient runs, (0.5 + 0.7) / 2 = 0.6 s;
    # k = ceil(10000 / 512) = 20 steps per epoch; matchmaking (2 s) starts after step 17 (1.8 s left), the group
    # forms 0.2 s after the epoch's steps; all-reduce 2·15/16 · 1 MB / 1 MB/s = 1.875 s: 0.6 + 2.075 / 20
    assert sixteen["compute_s"] == pytest.approx(0.6)
    assert sixteen["step_s"] == pytest.approx(0.70375)
    assert sixteen["throughput_samples_per_s"] == pytest.approx(16 * 32 / 0.70375)
    # its wire, 0.10375 s over 0.6 s of compute (0.17), inside the 0.1-0.5 validated at N=16, with errors +10 % and
    # -20 %: the band, no extrapolation
    assert sixteen["wire_over_compute"] == pytest.approx(0.10375 / 0.6)
    assert sixteen["band_step_s"] == [pytest.approx(0.70375 / 1.1), pytest.approx(0.70375 / 0.8)]
    assert sixteen["unvalidated"] is False and sixteen["payload_share"] == 0.8
    assert sixteen["speedup"] is None and "16 vCPUs" in sixteen["speedup_unknown"]
    assert sixteen["link"]["mbit"] == 10.0

    # 8 x 2, local updates, target 625: a 2-vCPU peer's compute from the one-process 2-vCPU baseline, 0.8 s for 64
    # samples: 0.4 s for 32; k = ceil(625 / 256) = 3; the background state round (2 s + 2·7/8 · 1 s) holds the next
    # step's optimizer call, after its 0.4 s: 3.35 s over 3 steps
    assert eight["compute_s"] == pytest.approx(0.4) and "per sample" in eight["compute_from"]
    assert eight["step_s"] == pytest.approx(0.4 + 3.35 / 3)

    # no number where the peer's compute cannot be measured here, or nothing of the strategy ran
    assert four["step_s"] is None and "4 vCPUs" in four["not_projected"]
    assert ps["step_s"] is None and "slice run of ps" in ps["not_projected"]
    # the equal-resource baselines: one process with 16 vCPUs each, never a number
    assert [(b["peers"], b["peer_cpus"], b["batch_size"]) for b in baselines] == [(16, 1, 512), (8, 2, 256),
                                                                                   (4, 4, 128)]
    assert all(b["step_s"] is None and "16 vCPUs" in b["not_projected"] for b in baselines)


def test_projection_without_validation_is_extrapolation(tmp_path):
    write_slice(tmp_path)
    evidence = evidence_of(tmp_path / "results.json", validation_case("ps", 4, 0.1))
    (row, *_) = projected_rows([configuration("hivemind", 16, 1, HIVEMIND)], slice_runs([tmp_path / "hivemind"], 0.8),
                               ONE_MB_PER_S, 2, evidence)
    assert row["step_s"] is not None and row["band_step_s"] is None and row["unvalidated"] is True


def test_a_model_that_failed_its_validation_gives_no_thesis_row_a_number(tmp_path):
    write_slice(tmp_path)
    # hivemind's model missed its ±25 % goal at N=8 (+312 %)
    evidence = evidence_of(tmp_path / "results.json", validation_case("hivemind", 4, 0.1),
                           validation_case("hivemind", 8, 3.12))
    (row, *_) = projected_rows([configuration("hivemind", 16, 1, HIVEMIND)], slice_runs([tmp_path / "hivemind"], 0.8),
                               ONE_MB_PER_S, 2, evidence)
    assert row["step_s"] is None and "throughput_samples_per_s" not in row
    assert row["not_projected"] == ("hivemind's cost model failed its validation: held-out error +312.0% at N=8, "
                                    "20 Mbit/s (model mlp), beyond its goal of ±25%")


def test_saved_rows_are_judged_against_todays_evidence(tmp_path):
    """A saved row loses its number where its model has failed since, or where it was projected with the nominal
    rate (no payload_share); otherwise its extrapolation mark follows today's validated region (N, wire/compute,
    S), and a row saved before it recorded its wire/compute is not placed in it."""
    evidence = evidence_of(tmp_path / "results.json", validation_case("ring", 8, -0.7), validation_case("ps", 8, 0.1))
    lan = {"name": "lan", "mbit": 1000.0, "latency_ms": 0.0, "source": "conf/network/lan.yaml"}

    def saved(strategy, peers, **more):
        return {"strategy": strategy, "peers": peers, "link": lan, "step_s": 1.0, "band_step_s": [0.9, 1.1],
                "throughput_samples_per_s": 256.0, "unvalidated": False, "payload_share": 0.8,
                "wire_over_compute": 50.0, "size_bytes": 1e6} | more

    ring = judged(saved("ring", 8), evidence)
    assert ring["step_s"] is None and ring["throughput_samples_per_s"] is None and "-70.0%" in ring["not_projected"]
    stale = judged({k: v for k, v in saved("ps", 8).items() if k != "payload_share"}, evidence)
    assert stale["step_s"] is None and stale["not_projected"] == STALE
    ps = judged(saved("ps", 8), evidence)
    assert ps["step_s"] == 1.0 and ps["unvalidated_why"] == ["wire/compute 50 outside the 10 validated at N=8"]
    assert ps["band_step_s"] is None and ps["projected"]  # outside the validated region: no band
    inside = judged(saved("ps", 8, wire_over_compute=10.0), evidence)  # on lan all the same: the axes carry over
    assert inside["unvalidated"] is False and inside["band_step_s"] == [pytest.approx(1 / 1.1)] * 2  # one case, +10 %
    unplaced = judged({k: v for k, v in saved("ps", 8).items() if k != "wire_over_compute"}, evidence)
    assert unplaced["step_s"] == 1.0 and unplaced["band_step_s"] is None and unplaced["unvalidated_why"] == [UNPLACED]


def test_a_row_refused_under_an_earlier_validation_says_so_when_today_passes(tmp_path):
    """A row saved without a number because its model had failed then: today's validation passes (ring met its
    goal), so the row no longer claims the failure, and asks for a new projection; never a number it did not have."""
    evidence = evidence_of(tmp_path / "results.json", validation_case("ring", 8, -0.05))
    then = ("ring's cost model failed its validation: held-out error -71.1% at N=16, 20 Mbit/s (model mlp), beyond "
            "its goal of ±15%")
    row = judged({"strategy": "ring", "peers": 8, "step_s": None, "not_projected": then, "projected": True}, evidence)
    assert row["step_s"] is None and row["projected"] is False
    assert row["not_projected"].startswith("refused when its model had failed an earlier validation (ring's cost model")
    assert "run `python bench/run.py thesis` again" in row["not_projected"]
    thread = "a peer with 8 vCPUs: its compute per step cannot be measured on 2 cores"
    kept = judged({"strategy": "ring", "peers": 8, "step_s": None, "not_projected": thread}, evidence)
    assert kept["not_projected"] == thread and kept["projected"] is False


def test_a_rerun_of_some_families_keeps_the_others():
    """Each family keeps the date, machine and sweep it was measured with."""
    def sweep(path, family):
        return {"path": path, "kept": False, "summary": f"families.{family}"}
    def family(speedup, measured_at, machine):
        return {"measured_at": measured_at, "machine": machine, "rows": [{"speedup": speedup}]}
    kept = {"name": "thesis", "measured_at": "then", "machine": "old", "ratio": 0.9,
            "families": {"hivemind": family(0.5, "then", "old"), "strategies": family(0.9, "then", "old")},
            "sweeps": [sweep("multirun/a/hivemind", "hivemind"), sweep("multirun/a/strategies", "strategies")]}
    new = {"name": "thesis", "measured_at": "now", "machine": "new", "ratio": 0.7,
           "families": {"hivemind": family(0.7, "now", "new")}, "projected_remainder": {"rows": []},
           "sweeps": [sweep("multirun/b/hivemind", "hivemind")]}
    merged = merge(kept, new)
    assert merged["families"] == {"hivemind": family(0.7, "now", "new"), "strategies": family(0.9, "then", "old")}
    assert merged["ratio"] == 0.9 and merged["projected_remainder"] == {"rows": []}
    assert merged["sweeps"] == [sweep("multirun/a/strategies", "strategies"), sweep("multirun/b/hivemind", "hivemind")]


def test_a_rerun_of_one_family_keeps_the_projected_rows_it_had_no_runs_for(tmp_path):
    """The strategies family rerun alone: its projected rows are new, the hivemind rows (no hivemind slice run at
    hand this time) keep their saved numbers and date; a row that could not be projected anyway stays new."""
    def projected(family, configuration, step_s, slice_runs, sweep):
        return {"family": family, "configuration": configuration, "step_s": step_s, "slice_runs": slice_runs,
                "parameters_from": [sweep], "strategy": family, "peers": 16, "payload_share": 0.8,
                "link": {"name": "test", "mbit": 20.0, "latency_ms": 0.0, "source": "test"}}
    kept = {"measured_at": "then", "families": {}, "projected_remainder": {"from_sweeps": ["hivemind"], "rows": [
        projected("hivemind", "peers=16", 1.5, 3, "hivemind"), projected("strategies", "strategy=ring", None, 0, ""),
        projected("hivemind", "peers=4", None, 3, "")]}}
    new = {"measured_at": "now", "families": {}, "projected_remainder": {"from_sweeps": ["strategies"], "rows": [
        projected("hivemind", "peers=16", None, 0, ""), projected("strategies", "strategy=ring", 0.4, 3, "strategies"),
        projected("hivemind", "peers=4", None, 0, "")]}}
    remainder = merge(kept, new, validated_hivemind(tmp_path / "results.json"))["projected_remainder"]
    assert [(r["configuration"], r["step_s"], r.get("measured_at")) for r in remainder["rows"]] == \
        [("peers=16", 1.5, "then"), ("strategy=ring", 0.4, None), ("peers=4", None, None)]
    assert (remainder["projected"], remainder["not_projected"]) == (2, 1)
    assert remainder["from_sweeps"] == ["hivemind", "strategies"]


def test_the_best_speedup_leaves_out_the_baselines_own_ratio_of_one():
    """The baselines are rows too, each at speedup 1 against itself: the best speedup is the configurations'."""
    rows = [{"configuration": "single 2×1cpu", "baseline": True, "speedup": 1.0},
            {"configuration": "hivemind 2×1cpu", "baseline": False, "speedup": 0.73}]
    merged = merge({"families": {}}, {"name": "thesis", "families": {"hivemind": {"rows": rows}}})
    assert merged["ratio"] == 0.73


def test_rows_compare_each_configuration_with_its_baseline_never_a_baseline_with_itself(tmp_path):
    """The thesis's rows come from the report model: a baseline's row has no ratio and no claim (it was compared with
    itself, p = 1, inside Holm's family); each configuration's time-to-target ratio has its interval, a miss
    censored, beside its speedup."""
    from bench.thesis import rows_of
    from helpers import write_sweep

    def blocks(strategy, peers, throughputs, times):
        return [(strategy, peers, 1, t, x, {}) for t, x in zip(throughputs, times)]

    sweep = write_sweep(tmp_path / "strategies", {
        "strategy=ring": blocks("ring", 2, [90.0, 95.0, 92.0], [9.0, 9.5, 9.2]),
        "strategy=ps": blocks("ps", 2, [70.0, 72.0, 71.0], [14.0, None, 15.0]),
        "baseline_2x1": blocks("single", 2, [100.0, 100.0, 100.0], [10.0, 11.0, 10.5]),
        "baseline_1x1": blocks("single", 1, [60.0] * 3, [15.0] * 3)})
    rows = {r["configuration"]: r for r in rows_of(sweep)}
    for label in ("single 2×1cpu", "single 1×1cpu"):
        assert rows[label]["baseline"] and rows[label]["speedup"] is None and rows[label]["speedup_claim"] is None
        assert rows[label]["time_to_target_ratio"] is None
    ring = rows["ring 2×1cpu"]
    low, high = ring["time_to_target_ratio_interval_95"]
    assert low < ring["time_to_target_ratio"] < high and ring["time_to_target_ratio_blocks"] == 3
    assert ring["speedup_interval_95"] is not None and ring["reached_target"] == "3 of 3"
    ps = rows["ps 2×1cpu"]
    assert ps["reached_target"] == "2 of 3" and ps["time_to_target_ratio_censored"] == 1
    assert ps["time_to_target_ratio_claim"] == "cannot tell"  # its miss, at its horizon, spreads 3 blocks
