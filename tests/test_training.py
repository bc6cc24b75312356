"""Real short runs on digits: the loss falls, the logs and summary are complete, and runs are reproducible."""
import json

from conftest import run_train
from metrics.jsonl import read_jsonl
from metrics.steplog import STEP_FIELDS


def test_single_run_learns_and_leaves_complete_metrics(run_dir):
    result = run_train(run_dir, "max_steps=60", "eval_every=20")
    assert result.returncode == 0, result.stderr
    steps = read_jsonl(run_dir / "peer0" / "steps.jsonl")
    assert [s["step"] for s in steps] == list(range(1, 61))
    assert set(STEP_FIELDS) <= set(steps[0])
    losses = [s["loss"] for s in steps]
    assert sum(losses[-10:]) / 10 < 0.8 * sum(losses[:10]) / 10
    evals = read_jsonl(run_dir / "peer0" / "eval.jsonl")
    assert [e["step"] for e in evals] == [0, 20, 40, 60]
    assert evals[-1]["test_accuracy"] > evals[0]["test_accuracy"]
    assert len(read_jsonl(run_dir / "peer0" / "resources.jsonl")) >= 2

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["total_samples"] == 60 * 32
    assert summary["throughput_samples_per_s"] > 0
    assert summary["final_test_accuracy"] == evals[-1]["test_accuracy"]
    assert abs(sum(summary["time_breakdown_share"].values()) - 1) < 1e-6
    assert summary["peers"][0]["peak_rss_bytes"] > 50e6
    assert summary["bytes_sent_per_step"] == 0 and summary["methods"]


def test_time_to_target(run_dir):
    result = run_train(run_dir, "max_steps=40", "target.metric=test_loss", "target.value=100")
    assert result.returncode == 0, result.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps_to_target"] == 0 and summary["time_to_target_s"] is not None


def test_same_seed_same_losses(tmp_path):
    losses = []
    for name in ("a", "b"):
        result = run_train(tmp_path / name, "max_steps=15", "seed=3")
        assert result.returncode == 0, result.stderr
        losses.append([s["loss"] for s in read_jsonl(tmp_path / name / "peer0" / "steps.jsonl")])
    assert losses[0] == losses[1]
    other = run_train(tmp_path / "c", "max_steps=15", "seed=4")
    assert other.returncode == 0
    assert [s["loss"] for s in read_jsonl(tmp_path / "c" / "peer0" / "steps.jsonl")] != losses[0]


def test_allreduce_keeps_peers_identical(run_dir):
    result = run_train(run_dir, "strategy=allreduce", "peers=2", "max_steps=20")
    assert result.returncode == 0, result.stderr
    digests = [json.loads((run_dir / f"peer{r}" / "result.json").read_text())["param_sha256"] for r in (0, 1)]
    assert digests[0] == digests[1]
    steps = read_jsonl(run_dir / "peer0" / "steps.jsonl")
    assert steps[0]["bytes_sent"] > 0 and steps[0]["comm_s"] > 0
