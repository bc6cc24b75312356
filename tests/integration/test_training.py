"""Real short runs on digits (integration tier): the loss falls, the logs and summary agree with what
the peers logged, the equal-resource baseline is one process, DDP moves the ring's payload, and every
strategy's step breakdown is consistent with its wall clock."""
import itertools
import time

import pytest

from helpers import (TINY_DIGITS_BYTES, launch_spec_of, leftover_processes, param_digests, quick_run, results,
                     run_train, steps_of, strategy_names, summary_of)
from metrics.recording.jsonl import read_jsonl
from metrics.recording.steplog import PHASES, STEP_FIELDS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def test_single_run_learns_and_leaves_complete_metrics(run_dir):
    result = run_train(run_dir, "max_steps=60", "eval_every=20")
    assert result.returncode == 0, result.stderr
    steps = steps_of(run_dir, 0)
    assert [s["step"] for s in steps] == list(range(1, 61))
    assert set(STEP_FIELDS) <= set(steps[0])
    losses = [s["loss"] for s in steps]
    assert sum(losses[-10:]) / 10 < 0.8 * sum(losses[:10]) / 10
    evals = read_jsonl(run_dir / "peer0" / "eval.jsonl")
    # in training, the start is evaluated only where the next evaluation is at the target: 20 steps are below it
    assert [e["step"] for e in evals] == [20, 40, 60] and evals[0]["test_accuracy"] < 0.95
    assert evals[-1]["test_accuracy"] > evals[0]["test_accuracy"]
    assert len(read_jsonl(run_dir / "peer0" / "resources.jsonl")) >= 2

    summary = summary_of(run_dir)
    assert summary["status"] == "completed" and summary["total_samples"] == 60 * 32
    # the measurement window (measure_window: after step 5, 30 steps): steps 6-35
    assert summary["window"] == {"first": 6, "last": 35, "complete": True}
    assert summary["throughput_samples_per_s"] == pytest.approx(30 * 32 / (steps[34]["train_s"] - steps[4]["train_s"]))
    assert steps[-1]["train_s"] < steps[-1]["wall_s"]  # evaluation pauses are not training time
    assert summary["final_test_accuracy"] == evals[-1]["test_accuracy"]
    assert abs(sum(summary["time_breakdown_share"].values()) - 1) < 1e-6
    assert summary["peers"][0]["peak_rss_bytes"] > 50e6
    assert summary["bytes_sent_per_step"] == 0 and summary["methods"] and summary["is_baseline"] is True


@pytest.mark.timeout(60)
def test_a_runs_wall_phases_split_the_commands_wall_clock(run_dir):
    started = time.time()
    result = run_train(run_dir, "strategy=single", "max_steps=20", "eval_every=10")
    ended = time.time()
    assert result.returncode == 0, result.stderr
    phases = summary_of(run_dir)["wall_phases_s"]
    assert min(phases.values()) >= 0, phases
    # from the command's process start to its summary: only saving it, printing and exiting are left out
    assert ended - started - 1.0 < sum(phases.values()) < ended - started + 0.02, (ended - started, phases)
    evals = read_jsonl(run_dir / "peer0" / "eval.jsonl")  # each evaluation as it logged itself
    assert phases["precise_bn_s"] == pytest.approx(sum(e["precise_bn_s"] for e in evals))
    assert phases["precise_bn_s"] + phases["test_s"] == pytest.approx(sum(e["eval_s"] for e in evals))


@pytest.fixture(scope="module")
def allreduce_run(tmp_path_factory):
    """One DDP run of 2 peers, 20 steps, evaluated every 2 steps after training against a target of 0.6: the
    evaluation test and the payload test only read what it left."""
    run_dir = tmp_path_factory.mktemp("allreduce") / "run"
    result = run_train(run_dir, "strategy=allreduce", "peers=2", "max_steps=20", "eval_every=2",
                       "target.metric=test_accuracy", "target.value=0.6", "eval_in_training=false")
    yield run_dir, result
    if (run_dir / ".avgbench" / "run_id").exists():  # as the run_dir fixture: no process outlives it
        for proc in leftover_processes(run_dir):
            proc.kill()


@pytest.mark.timeout(90)
def test_evaluations_run_after_training_and_stay_out_of_its_time(allreduce_run):
    # DDP wraps the model: what is saved and evaluated is the model inside the wrapper
    run_dir, result = allreduce_run
    assert result.returncode == 0, result.stderr
    summary = summary_of(run_dir)
    for rank in (0, 1):
        steps, evals = steps_of(run_dir, rank), read_jsonl(run_dir / f"peer{rank}" / "eval.jsonl")
        assert [e["step"] for e in evals] == list(range(0, 21, 2))
        assert all(e["evaluated_at_s"] > steps[-1]["wall_s"] for e in evals)  # every one after the last step
        # training time leaves out only the pauses to save weights and time the speed reference before the last
        # step (each lasting until the other worker ended its own: resume_together), not the evaluations
        timed_before = sum(m["pause_s"] for m in results(run_dir, (rank,))[0]["speed_reference"]["measurements"]
                           if m["step"] < 20)
        saved_before = sum(e["snapshot_s"] for e in evals if e["step"] < 20) + timed_before
        evaluated_before = sum(e["eval_s"] for e in evals if e["step"] < 20)
        assert saved_before <= steps[-1]["wall_s"] - steps[-1]["train_s"] < saved_before + evaluated_before / 2
        assert not (run_dir / f"peer{rank}" / "snapshots").exists()
        # the untrained model is at chance (about 0.1 on ten digits); 0.6, held, takes some steps
        crossed = next(i for i, (e, after) in enumerate(zip(evals, evals[1:]))
                       if e["test_accuracy"] >= 0.6 and after["test_accuracy"] >= 0.6)
        assert evals[crossed - 1]["train_s"] < summary["time_to_target_by_rank"][str(rank)] <= evals[crossed]["train_s"]
    assert summary["evaluation"]["evaluations"] == 11 and summary["evaluation"]["interval_samples"] == 2 * 2 * 32


def test_same_seed_same_losses(tmp_path):
    losses = []
    for name in ("a", "b"):
        result = run_train(tmp_path / name, "max_steps=15", "seed=3")
        assert result.returncode == 0, result.stderr
        losses.append([s["loss"] for s in steps_of(tmp_path / name, 0)])
    assert losses[0] == losses[1]
    other = run_train(tmp_path / "c", "max_steps=15", "seed=4")
    assert other.returncode == 0
    assert [s["loss"] for s in steps_of(tmp_path / "c", 0)] != losses[0]


def test_single_with_two_peers_is_one_process_with_their_threads_and_batch(run_dir):
    result = run_train(run_dir, "strategy=single", "peers=2", "peer_cpus=1", "batch_size=32", "max_steps=10",
                       "eval_every=0")
    assert result.returncode == 0, result.stderr
    spec = launch_spec_of(run_dir)
    assert spec.roles == ["worker"] and spec.threads == 2 and spec.batch_size == 64
    assert sorted(p.name for p in run_dir.glob("peer*")) == ["peer0"]  # one process
    steps = steps_of(run_dir, 0)
    assert [s["samples"] for s in steps] == [64 * n for n in range(1, 11)]  # 2 x 32 samples per step
    summary = summary_of(run_dir)
    assert summary["workers"] == 1 and summary["total_samples"] == 640 and summary["is_baseline"] is True
    # the window's steps 6-35, of which the run trained 6-10
    assert summary["window"] == {"first": 6, "last": 35, "complete": False}
    assert summary["throughput_samples_per_s"] == pytest.approx(5 * 64 / (steps[9]["train_s"] - steps[4]["train_s"]))


def test_ddp_allreduce_two_peers_moves_the_rings_payload_and_stays_identical(allreduce_run):
    run_dir, result = allreduce_run  # its evaluations (every 2 steps) move no payload
    assert result.returncode == 0, result.stderr
    assert launch_spec_of(run_dir).launcher == "local"
    digests = param_digests(run_dir, (0, 1))
    assert digests[0] == digests[1]
    for rank in (0, 1):
        steps = steps_of(run_dir, rank)
        # 2(N-1)/N x 4 bytes x 9978 parameters = 39912 bytes each way, every step
        assert [(s["bytes_sent"], s["bytes_recv"]) for s in steps] == [(TINY_DIGITS_BYTES, TINY_DIGITS_BYTES)] * 20
        assert all(s["link_s"] > 0 and s["comm_s"] >= 0 for s in steps)
    summary = summary_of(run_dir)
    assert summary["bytes_sent_per_sample"] == pytest.approx(TINY_DIGITS_BYTES / 32)


# every strategy in the registry (conf/strategy/*.yaml), and variants that take another code path
RUNS = {name: quick_run(name) for name in strategy_names()} | {
    "allreduce-flat": ["strategy=allreduce", "allreduce.ddp=false"]}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_every_strategy_logs_a_consistent_step_breakdown_and_accounts_its_bytes(run_dir, name):
    result = run_train(run_dir, *RUNS[name], "peers=2", "max_steps=4", "eval_every=0")
    assert result.returncode == 0, result.stderr
    workers = [r["rank"] for r in results(run_dir, range(launch_spec_of(run_dir).processes))
               if r["role"] == "worker"]
    baseline = summary_of(run_dir)["is_baseline"]
    assert workers == ([0] if baseline else [0, 1])
    # payload: none for the one-process baseline, sent and received by the workers of every averaging strategy
    logged = [s for rank in workers for s in steps_of(run_dir, rank)]
    sent = sum(s["bytes_sent"] for s in logged)
    assert (sent == 0) if baseline else (sent > 0 and sum(s["bytes_recv"] for s in logged) > 0)
    for rank in workers:
        steps = steps_of(run_dir, rank)
        assert steps, f"peer{rank} logged no steps"
        for s in steps:
            assert s["compute_s"] > 0 and s["comm_s"] >= 0 and s["data_s"] >= 0 and s["opt_s"] >= 0, s
        # no evaluation between steps (eval_every=0): the phases fit in the wall time from one step to the next
        for before, after in itertools.pairwise(steps):
            assert sum(after[p] for p in PHASES) <= after["wall_s"] - before["wall_s"] + 1e-4, after


def trained_parameters(run_dir, rank: int, step: int) -> dict:
    """The parameters a worker's weights held after `step` (keep_weights=true), BatchNorm statistics left out."""
    import torch

    state = torch.load(run_dir / f"peer{rank}" / "weights" / f"step{step:07d}.pt", weights_only=True)
    return {k: v for k, v in state.items() if not k.endswith(("running_mean", "running_var", "num_batches_tracked"))}


def test_allreduce_and_the_one_process_baseline_compute_the_same_updates_in_float64(tmp_path):
    # the same samples in the same order (job/data.py GlobalOrder), the same initial weights, and BatchNorm over
    # the same groups of 32 (ghost BatchNorm in the baseline's batch of 64): the same model after 20 steps
    common = ["model=tiny", "dtype=float64", "max_steps=20", "eval_every=10", "keep_weights=true", "seed=4",
              "peers=2", "target.value=0.5", "noise_scale_every=1", "eval_in_training=false"]
    for name in ("allreduce", "single"):
        result = run_train(tmp_path / name, f"strategy={name}", *common)
        assert result.returncode == 0, result.stderr
    baseline = trained_parameters(tmp_path / "single", 0, 20)
    assert baseline.keys() == trained_parameters(tmp_path / "single", 0, 0).keys() and len(baseline) == 8  # 3 layers, 2 BatchNorms
    moved = max((baseline[k] - v).abs().max().item() for k, v in trained_parameters(tmp_path / "single", 0, 0).items())
    assert moved > 1e-2  # training changed the model: equality below is not that of the initial weights
    for rank in (0, 1):
        peer = trained_parameters(tmp_path / "allreduce", rank, 20)
        differences = {k: (peer[k] - v).abs().max().item() for k, v in baseline.items()}
        assert max(differences.values()) < 1e-6, differences
    # their evaluations agree too (precise BatchNorm recomputes what each worker's own batches left behind)
    curves = [[e["test_loss"] for e in read_jsonl(tmp_path / name / "peer0" / "eval.jsonl")]
              for name in ("allreduce", "single")]
    assert curves[0] == pytest.approx(curves[1], rel=1e-9)
    # the gradient the peers averaged is the baseline's whole-batch gradient (the noise scale's large batch), and
    # each peer's own gradient of half the batch is noisier
    used = {name: [s["grad_sq_global"] for s in steps_of(tmp_path / name, 0)] for name in ("allreduce", "single")}
    assert len(used["single"]) == 20 and used["allreduce"] == pytest.approx(used["single"], rel=1e-9)
    own = [s["grad_sq_local"] for rank in (0, 1) for s in steps_of(tmp_path / "allreduce", rank)]
    assert sum(own) / len(own) > sum(used["single"]) / 20
    noise_scale = summary_of(tmp_path / "allreduce")["noise_scale"]
    assert (noise_scale["steps"], noise_scale["worker_batch"], noise_scale["global_batch"]) == (20, 32, 64)
