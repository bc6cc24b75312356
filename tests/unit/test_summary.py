"""summary.json from per-peer logs written by hand (unit tier): every figure against numbers
computed here from its definition."""
import json

import pytest

from metrics.recording.rundir import RunDir
from metrics.summary.bounds import LinkBound
from metrics.summary.build import LaunchFacts, StrategyFacts
from metrics.summary.build import build_summary as build
from metrics.summary.schema import Summary

from helpers import summary_config, summary_outcome, write_lines


def build_summary(*args, **kwargs) -> dict:
    """The summary as summary.json holds it."""
    return build(*args, **kwargs).to_dict()


pytestmark = pytest.mark.timeout(30)

PHASES = {"data_s", "compute_s", "comm_s", "opt_s", "wait_s"}


def step(n, samples, train_s, sent, recv, compute, comm):
    return {"step": n, "wall_s": train_s + 0.5, "train_s": train_s, "samples": samples, "loss": 1.0,
            "data_s": 0.1, "compute_s": compute, "comm_s": comm, "opt_s": 0.1,
            "bytes_sent": sent, "bytes_recv": recv, "round": None}


def evaluation(n, train_s, accuracy, loss):
    return {"step": n, "train_s": train_s, "wall_s": train_s, "samples": 0, "test_accuracy": accuracy,
            "test_loss": loss, "eval_s": 0.2}


@pytest.fixture
def run(tmp_path):
    """Two workers and a server. Rank 0: 4 steps of 32 samples, done at train_s 3.0; rank 1:
    3 steps of 48, done at 4.8 (the longest). The server (rank 2) logs no steps."""
    run = RunDir(tmp_path / "run")
    write_lines(run.peer(0).steps, [step(n, 32 * n, 0.75 * n, 100, 80, 0.4, 0.4) for n in range(1, 5)])
    write_lines(run.peer(1).steps, [step(1, 48, 1.6, 50, 10, 0.6, 0.2), step(2, 96, 3.2, 0, 0, 0.6, 0.2),
                                    step(3, 144, 4.8, 150, 30, 0.6, 0.2)])
    write_lines(run.peer(0).evals, [evaluation(0, 0.0, 0.1, 2.3), evaluation(2, 1.4, 0.6, 1.2),
                                    evaluation(4, 3.0, 0.8, 0.6)])
    write_lines(run.peer(1).evals, [evaluation(0, 0.0, 0.1, 2.3), evaluation(2, 2.9, 0.5, 1.5),
                                    evaluation(3, 4.8, 0.7, 0.9)])
    run.peer(0).result.write_text(json.dumps({"rank": 0, "role": "worker", "effective_lr": 0.02}))
    run.peer(2).path.mkdir()
    run.peer(2).result.write_text(json.dumps({"rank": 2, "role": "server"}))
    return run


def test_throughput_is_all_samples_over_the_longest_workers_time(run):
    summary = build_summary(run, summary_config(), summary_outcome())
    assert summary["workers"] == 2  # the server trains nothing
    assert summary["total_samples"] == 4 * 32 + 3 * 48
    assert summary["throughput_samples_per_s"] == pytest.approx(272 / 4.8)  # rank 1 is the longest, not rank 0


def test_accuracy_by_worker_and_final_figures_are_the_worst_workers(run):
    summary = build_summary(run, summary_config(), summary_outcome())
    accuracy = summary["accuracy_by_worker"]
    assert accuracy["mean"] == pytest.approx(0.75)
    assert (accuracy["worst"], accuracy["best"]) == (0.7, 0.8)
    assert summary["final_test_accuracy"] == 0.7 and summary["final_test_loss"] == 0.9


def test_time_to_target_needs_every_worker_to_cross_for_good(run):
    summary = build_summary(run, summary_config("test_accuracy", 0.6), summary_outcome())
    # rank 0 reaches 0.6 at 1.4 s (step 2) and holds it at step 4; rank 1 reaches it only at its last evaluation
    assert summary["time_to_target_by_rank"] == {0: 1.4, 1: None}
    assert summary["time_to_target_s"] is None and summary["steps_to_target"] is None


def test_loss_target_is_reached_from_above(run):
    summary = build_summary(run, summary_config("test_loss", 1.2), summary_outcome())
    # rank 0: 1.2 at 1.4 s, held (0.6); rank 1: 1.5 at 2.9 s is not yet <= 1.2, 0.9 at its last evaluation
    # is unconfirmed
    assert summary["time_to_target_by_rank"] == {0: 1.4, 1: None} and summary["time_to_target_s"] is None


def test_time_breakdown_is_the_mean_over_all_steps_and_its_shares(run):
    summary = build_summary(run, summary_config(), summary_outcome())
    breakdown, shares = summary["time_breakdown_s"], summary["time_breakdown_share"]
    # 4 steps of rank 0 (compute 0.4, comm 0.4) and 3 of rank 1 (compute 0.6, comm 0.2): a step is 1.0 s
    assert breakdown["compute_s"] == pytest.approx((4 * 0.4 + 3 * 0.6) / 7)
    assert breakdown["comm_s"] == pytest.approx((4 * 0.4 + 3 * 0.2) / 7)
    assert breakdown["data_s"] == pytest.approx(0.1) and breakdown["opt_s"] == pytest.approx(0.1)
    assert set(shares) == PHASES
    assert shares["compute_s"] == pytest.approx(3.4 / 7) and shares["comm_s"] == pytest.approx(2.2 / 7)
    assert shares["data_s"] == pytest.approx(0.1) and sum(shares.values()) == pytest.approx(1.0)


def test_waiting_is_a_phase_of_its_own_and_the_shares_still_sum_to_one(tmp_path):
    """A contended one-process run: steps of 1.0 s (data 0.1, compute 0.3, optimizer 0.1) that sent nothing and
    waited 0.5 s for a CPU. A run recorded before wait_s (its steps have none) reads it as 0."""
    run = RunDir(tmp_path / "run")
    write_lines(run.peer(0).steps, [step(n, 32 * n, float(n), 0, 0, 0.3, 0.0) | {"wait_s": 0.5} for n in range(1, 4)])
    summary = build_summary(run, summary_config(), summary_outcome())
    shares = summary["time_breakdown_share"]
    assert shares["wait_s"] == pytest.approx(0.5) and shares["compute_s"] == pytest.approx(0.3)
    assert shares["comm_s"] == 0
    assert sum(shares.values()) == pytest.approx(1.0)
    assert summary["peers"][0]["wall_s_per_step"] == pytest.approx(1.0)
    old = RunDir(tmp_path / "old")
    write_lines(old.peer(0).steps, [step(n, 32 * n, float(n), 10, 10, 0.6, 0.2) for n in range(1, 4)])
    assert build_summary(old, summary_config(), summary_outcome())["time_breakdown_s"]["wait_s"] == 0


def test_hidden_communication_is_its_own_figure_outside_the_step(tmp_path):
    """DDP-like steps: 0.3 s of link time ran behind backward (hidden_comm_s); the phases still sum to the
    step and the hidden time is reported beside them, as a mean and a share of the step."""
    run = RunDir(tmp_path / "run")
    write_lines(run.peer(0).steps, [step(n, 32 * n, float(n), 10, 10, 0.6, 0.2) | {"hidden_comm_s": 0.3}
                                    for n in range(1, 4)])
    summary = build_summary(run, summary_config(), summary_outcome())
    assert set(summary["time_breakdown_share"]) == PHASES
    assert summary["hidden_comm_s"] == pytest.approx(0.3) and summary["hidden_comm_share"] == pytest.approx(0.3)


def test_bytes_per_step_and_per_sample(run):
    summary = build_summary(run, summary_config(), summary_outcome())
    sent, recv = 4 * 100 + 50 + 0 + 150, 4 * 80 + 10 + 0 + 30  # 600, 360
    assert summary["bytes_sent_per_step"] == pytest.approx(sent / 7)
    assert summary["bytes_recv_per_step"] == pytest.approx(recv / 7)
    assert summary["bytes_sent_per_sample"] == pytest.approx(sent / 272)  # not per step / a batch size
    assert summary["bytes_recv_per_sample"] == pytest.approx(recv / 272)


def test_run_facts_are_passed_through(run):
    summary = build_summary(run, summary_config(), summary_outcome(),
                            StrategyFacts(LinkBound({"transport": "gloo"}), is_baseline=True))
    assert summary["status"] == "completed" and summary["is_baseline"] is True
    assert summary["strategy_knobs"] == {"transport": "gloo"} and summary["effective_lr"] == 0.02
    assert summary["network"] == {"mode": "loopback", "per_peer": False}
    assert summary["network_scope"].startswith("host-wide") and summary["fault"] is None
    assert [p["rank"] for p in summary["peers"]] == [0, 1, 2]
    assert summary["peers"][2]["steps"] == 0 and summary["peers"][2]["result"]["role"] == "server"


def test_the_strategys_declared_counters_are_summed_over_peers_and_its_failure_counters_shown(run, capsys):
    """train.py prints the counters the strategy declares, whatever their names (none guessed from words)."""
    import train

    for rank, figures in ((0, {"rounds": 3, "round_trips_failed": 1, "x": 5}), (1, {"rounds": 4, "dropped": 0})):
        run.peer(rank).result.write_text(json.dumps({"rank": rank, "role": "worker", "strategy": figures}))
    summary = build(run, summary_config(), summary_outcome(), StrategyFacts(failure_counters=("dropped",)))
    train.print_result(run.path, summary, summary_outcome(), ("rounds", "dropped"))
    assert "avgbench: summed over peers: rounds 7, dropped 0\n" in capsys.readouterr().out
    assert summary.failure_counters == ["dropped"]


def test_the_earliest_fault_is_reported_with_the_time_to_the_outcome(run):
    run.peer(1).fault.write_text(json.dumps({"rank": 1, "kinds": ["stall_peer"], "step": 3, "time": 990.0}))
    run.peer(0).fault.write_text(json.dumps({"rank": 0, "kinds": ["kill_peer"], "step": 2, "time": 994.0}))
    fault = build_summary(run, summary_config(), summary_outcome("failed", ended_at=1000.0))["fault"]
    assert fault["rank"] == 1 and fault["kinds"] == ["stall_peer"]
    assert fault["run_ended_after_s"] == pytest.approx(10.0) and fault["survived"] is False


def test_an_empty_run_has_no_rates(tmp_path):
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    summary = build_summary(run, summary_config(), summary_outcome("failed"))
    assert summary["workers"] == 0 and summary["total_samples"] == 0
    assert summary["throughput_samples_per_s"] is None and summary["bytes_sent_per_sample"] is None
    assert summary["time_to_target_s"] is None and summary["time_breakdown_share"] == {}


def test_round_records_join_by_group_and_count_each_round_once():
    """Two members' records of one round make one round (bytes summed, the longer duration); a round whose second
    member failed is a failed round; group sizes count rounds, not member records."""
    from metrics.summary.rounds import join_rounds

    def member(rank, group, duration, sent, success=True, size=2):
        return {"rank": rank, "group_id": group, "kind": "gradients", "epoch": 0, "group_size": size,
                "started_at": 100.0 + rank, "duration_s": duration, "bytes_sent": sent, "bytes_recv": sent,
                "overlapped": False, "success": success}

    rounds = join_rounds([member(0, "a", 0.5, 10), member(1, "a", 0.7, 12), member(0, "b", 0.2, 3),
                          member(1, "b", 0.1, 0, success=False)])
    assert [(r["group_id"], r["members_recorded"], r["bytes_sent"], r["duration_s"], r["success"]) for r in rounds] \
        == [("a", 2, 22, 0.7, True), ("b", 2, 3, 0.2, False)]


def test_rounds_table_counts_each_round_once_over_a_configurations_runs(tmp_path):
    """Two runs of 2 workers: 3 gradient rounds (two of the whole swarm, one failed of 1) -> one row."""
    from metrics.report.runs import Group, Run
    from metrics.report.tables import rounds_table

    def run(rounds):
        sizes = {}
        for r in rounds:
            sizes[str(r["group_size"])] = sizes.get(str(r["group_size"]), 0) + 1
        return Run(tmp_path, Summary.from_dict({"workers": 2, "averaging_rounds": {"rounds": rounds,
                                                                                "group_sizes": {"gradients": sizes}}}),
                   [])

    def round_(size, success=True, duration=1.0):
        return {"kind": "gradients", "group_size": size, "success": success, "duration_s": duration}

    table = rounds_table([Group([run([round_(2), round_(1, False, 3.0)]), run([round_(2, duration=2.0)])], "hm")])
    assert table.rows == [["hm", "gradients", "3", "1: 1, 2: 2", "66.7", "1", "2"]]
    assert rounds_table([Group([Run(tmp_path, Summary.from_dict({"workers": 2}), [])], "ring")]) is None


# --- the measurement window (metrics/summary/window.py) -------------------------------------------------------------

@pytest.mark.parametrize("after, steps, period, expected", [
    (5, 30, (0, 1), (6, 35)),    # every step averages: steps 6..35
    (5, 30, (0, 5), (6, 35)),    # diloco H=5: syncs at 10..35, six whole periods
    (5, 30, (0, 4), (9, 40)),    # H=4: starts after the sync at 8, 8 periods of 4 (32 steps)
    (5, 30, (10, 5), (11, 40)),  # localsgd: 10 warm-up steps, then averages at 15..40
    (12, 7, (10, 5), (16, 25)),  # past the warm-up: after the average at 15, two periods
])
def test_the_window_starts_after_an_averaging_step_and_covers_whole_periods(after, steps, period, expected):
    from metrics.summary.window import window_steps

    assert window_steps(after, steps, period) == expected


@pytest.fixture
def warm_run(tmp_path):
    """Two workers of 8 steps of 10 samples: steps 1-2 are slow warm-up (2 s each), then 0.5 s a step on rank 0 and
    0.6 s on rank 1; step 1's bytes are a one-off broadcast (1000), then 10 sent and 20 received a step."""
    run = RunDir(tmp_path / "run")
    for rank, pace in ((0, 0.5), (1, 0.6)):
        clock, records = 0.0, []
        for n in range(1, 9):
            clock += 2.0 if n <= 2 else pace
            records.append(step(n, 10 * n, clock, 1000 if n == 1 else 10, 20, 1.8 if n <= 2 else pace - 0.2, 0.0))
        write_lines(run.peer(rank).steps, records)
    return run


def test_throughput_bytes_and_breakdown_are_measured_in_the_window_only(warm_run):
    summary = build_summary(warm_run, summary_config(), summary_outcome(), launch=LaunchFacts(window=(3, 6)))
    # steps 3-6: 4 steps of 10 samples per worker; rank 1 is the slower, 4 x 0.6 s
    assert summary["throughput_samples_per_s"] == pytest.approx(80 / 2.4)
    assert summary["total_samples"] == 160  # what was trained, all of it
    assert summary["bytes_sent_per_step"] == pytest.approx(10) and summary["bytes_recv_per_step"] == pytest.approx(20)
    assert summary["bytes_sent_per_sample"] == pytest.approx(80 / 80)
    assert summary["time_breakdown_s"]["compute_s"] == pytest.approx((0.3 + 0.4) / 2)
    assert summary["window"] == {"first": 3, "last": 6, "complete": True}
    assert summary["peers"][1]["window"] == {"samples": 40, "train_s": pytest.approx(2.4), "steps": 4}


def test_without_a_window_every_step_counts(warm_run):
    summary = build_summary(warm_run, summary_config(), summary_outcome())
    assert summary["throughput_samples_per_s"] == pytest.approx(160 / (4.0 + 6 * 0.6))
    assert summary["window"] is None


def test_a_run_that_ends_inside_the_window_is_measured_to_its_end_and_marked(warm_run):
    summary = build_summary(warm_run, summary_config(), summary_outcome(), launch=LaunchFacts(window=(5, 12)))
    assert summary["throughput_samples_per_s"] == pytest.approx(80 / (4 * 0.6))  # steps 5-8
    assert summary["window"] == {"first": 5, "last": 12, "complete": False}
    early = build_summary(warm_run, summary_config(), summary_outcome(), launch=LaunchFacts(window=(9, 12)))
    assert early["throughput_samples_per_s"] == pytest.approx(160 / (4.0 + 6 * 0.6))  # all of it
    assert early["window"] == {"first": 1, "last": 8, "complete": False}


def test_summary_json_round_trips_through_its_type_byte_for_byte(run):
    """What write_summary writes, loaded and written again, is the same text; its figures read as attributes."""
    from metrics.summary.build import write_summary

    written = write_summary(run, summary_config(), summary_outcome(), launch=LaunchFacts(window=(2, 3)))
    loaded = Summary.load(run.path)
    assert json.dumps(loaded.to_dict(), indent=1) == run.summary.read_text()
    assert loaded == Summary.from_dict(json.loads(json.dumps(written.to_dict())))
    assert (loaded.accuracy_by_worker.worst, loaded.window.first, loaded.peers[2].result["role"]) == (0.7, 2, "server")
    assert loaded.figures("status", "workers") == {"status": "completed", "workers": 2}
    with pytest.raises(AttributeError, match="no throughput"):
        loaded.figures("throughput")


def test_an_older_summary_loads_as_it_was_and_one_that_cannot_fails_in_one_line(tmp_path):
    """A summary from before a section existed loads with that section empty and unrecorded, keeps keys the type
    no longer names, and is written back as it was; a torn file, or one without a key its reader requires, fails
    with one line naming the file, the key and the fix."""
    from metrics.summary.schema import SummaryError

    older = {"status": "completed", "config": {"peers": 2}, "shape": None, "retired_figure": 3,
             "link": {"kind": "loopback", "asked": "loopback", "faithful": None, "reason": "not recorded"},
             "peers": [{"rank": 0, "steps": 4, "samples": 128, "train_s": 3.0}]}
    (tmp_path / "summary.json").write_text(json.dumps(older))
    summary = Summary.load(tmp_path)
    assert not summary.shape and summary.shape.host is None and not summary.window and not summary.speed_reference
    assert summary.link.scope is None and summary.peers[0].samples == 128 and summary.time_to_target_s is None
    assert summary.to_dict() == older and list(summary.to_dict()) == list(older)
    with pytest.raises(SummaryError) as missing:
        Summary.load(tmp_path, require=("config.peers", "config.data.name"))
    assert str(missing.value) == (f"{tmp_path / 'summary.json'}: no config.data.name (written by an older avgbench, "
                                  "or not by one): re-run it, or read it with the version that wrote it")
    (tmp_path / "summary.json").write_text('{"status": "compl')
    with pytest.raises(SummaryError, match=r"summary.json: not a readable summary .*; re-run the run") as torn:
        Summary.load(tmp_path)
    assert "\n" not in str(torn.value)
