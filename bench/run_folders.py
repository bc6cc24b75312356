"""Run folders as the report reads them (summary.json, a worker's steps and evaluations), written without
training: for the report's tests and the verdict simulation (bench/verdict_simulation.py)."""
import json
from pathlib import Path
from typing import Any

from metrics.summary.schema import Json

BlockRun = tuple[str, int, int, float, float | None, Json]  # write_sweep's run of a job in a block


def report_config(strategy: str, peers: int, peer_cpus: int = 1, block: int | None = None, **extra: Any) -> Json:
    """The config a run of the report's tests records: digits on the tiny model, target 0.9 test accuracy."""
    return {"strategy": {"name": strategy}, "data": {"name": "digits"}, "model": {"name": "tiny"}, "peers": peers,
            "peer_cpus": peer_cpus, "batch_size": 32, "lr": 0.01, "max_steps": 40, "eval_every": 10,
            "seed": 0 if block is None else block, "block": block,
            "target": {"metric": "test_accuracy", "value": 0.9},
            "report": {"baseline_strategy": "single"}} | extra


def write_report_run(path: Path, strategy: str, peers: int, throughput: float, time_to_target: float | None,
                     peer_cpus: int = 1, block: int | None = None, status: str = "completed",
                     summary: Json | None = None, config: Json | None = None) -> Path:
    """A finished run as the report reads it: summary.json and one worker's eval.jsonl (5 evaluations evenly over
    4000 samples / throughput seconds), crossing the target (0.9) at time_to_target, or never (None)."""
    config = report_config(strategy, peers, peer_cpus, block, **(config or {}))
    train_s = 4000 / throughput
    times = [train_s * k / 4 for k in range(5)]
    accuracy = [(0.95 if time_to_target is not None and t >= time_to_target else 0.5) for t in times]
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps({
        "status": status, "config": config, "is_baseline": strategy == "single", "target": config["target"],
        "throughput_samples_per_s": throughput, "total_samples": 4000, "time_to_target_s": time_to_target,
        "samples_to_target": None if time_to_target is None else time_to_target * throughput,
        "time_per_sample_s": None if not time_to_target else 1 / throughput,
        "bytes_sent_per_sample": 0 if strategy == "single" else 1000, "accuracy_by_worker": {"worst": 0.9},
        "time_breakdown_share": {"compute_s": 1.0}, "error": None if status == "completed" else
        f"Traceback (most recent call last):\nRuntimeError: {strategy} failed in block {block}", **(summary or {})}))
    (path / "peer0").mkdir()
    last_step = {"step": 40, "samples": 4000, "train_s": train_s, "loss": 1.0}
    (path / "peer0" / "steps.jsonl").write_text(json.dumps(last_step) + "\n")
    (path / "peer0" / "eval.jsonl").write_text("".join(
        json.dumps({"step": 10 * k, "samples": 1000 * k, "train_s": t, "test_accuracy": a}) + "\n"
        for k, (t, a) in enumerate(zip(times, accuracy))))
    return path


def write_sweep(sweep: Path, jobs: dict[str, list[BlockRun]], plan: Json | None = None) -> Path:
    """A multirun's directory: jobs = {job name: [(strategy, peers, peer_cpus, throughput, time_to_target,
    write_report_run's extra keyword arguments) per block]}, and its plan file as the sweeper writes it (the blocks
    declared, every job in its order), with `plan`'s fields (its declaration's merged in)."""
    plan = plan or {}
    order = [{"block": block, "job": f"block{block}/{name}"} for name, runs in jobs.items()
             for block in range(len(runs))]
    declaration = {"blocks": max(map(len, jobs.values()), default=0)} | plan.get("declaration", {})
    (sweep / ".avgbench").mkdir(parents=True)
    (sweep / ".avgbench" / "sweep.json").write_text(json.dumps(
        {"jobs": [], "kept": [], "to_run": 0, "order": order} | plan | {"declaration": declaration}))
    for name, blocks in jobs.items():
        for block, (strategy, peers, cpus, throughput, ttt, extra) in enumerate(blocks):
            write_report_run(sweep / f"block{block}" / name, strategy, peers, throughput, ttt, cpus, block, **extra)
    return sweep
