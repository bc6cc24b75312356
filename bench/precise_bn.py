#!/usr/bin/env python
"""How many training samples precise BatchNorm needs: a run's kept weights, evaluated after precise BatchNorm on
subsets of several sizes and on the whole training split (the reference).

RUN_DIR: a run with keep_weights=true. Each size gets `draws` subsets, the project's fixed one
(PRECISE_BN_SUBSET_SEED) first; summarise says what is compared.
"""
import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import Dataset

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import job.evaluation as evaluation  # noqa: E402
from job.data import load_splits  # noqa: E402
from job.model import build_model  # noqa: E402
from metrics.recording.rundir import RunDir  # noqa: E402
from metrics.summary.target import Curve, bootstrap, crossing_step  # noqa: E402

WHOLE = "whole"


def precise_for(train: Dataset, size: int, batch_size: int, seed: int) -> evaluation.PreciseBatchNorm:
    """PreciseBatchNorm on the subset of `size` drawn with `seed` (seed PRECISE_BN_SUBSET_SEED: the project's)."""
    kept, evaluation.PRECISE_BN_SUBSET_SEED = evaluation.PRECISE_BN_SUBSET_SEED, seed
    try:
        return evaluation.PreciseBatchNorm(train, size, batch_size, torch.device("cpu"))
    finally:
        evaluation.PRECISE_BN_SUBSET_SEED = kept


def save_outcomes(by_step: dict[int, dict[str, np.ndarray]], path: Path) -> Path:
    """Each test sample's outcome by step, as eval_samples.npz holds them (metrics/summary/target.py reads them)."""
    steps = sorted(by_step)
    np.savez(path, step=np.array(steps), correct=np.stack([by_step[s]["correct"] for s in steps]),
             loss=np.stack([by_step[s]["loss"] for s in steps]))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--sizes", type=int, nargs="+", default=[128, 256, 512])
    parser.add_argument("--draws", type=int, default=3, help="subsets per size (the project's first)")
    parser.add_argument("--steps", type=int, nargs="*", help="saved steps to evaluate (default: all)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--loss-target", type=float, default=0.2, help="a test_loss target beside the run's own")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    run = RunDir(args.run_dir)
    cfg = cast(DictConfig, OmegaConf.load(run.config))  # train.py saved a DictConfig
    splits = load_splits(cfg)
    weights = {int(p.stem.removeprefix("step")): p for p in sorted(run.peer(0).weights.glob("step*.pt"))}
    chosen = [(s, p) for s, p in weights.items() if not args.steps or s in args.steps]
    arms = [(size, seed) for size in args.sizes for seed in range(args.draws)] + [(WHOLE, 0)]
    precise = {arm: precise_for(splits.train, len(splits.train) if arm[0] == WHOLE else arm[0], cfg.batch_size,
                                arm[1]) for arm in arms}
    model = build_model(cfg, splits.num_classes, splits.channels)
    target = cast(dict[str, Any], OmegaConf.to_container(cfg.target))  # a DictConfig's container is a dict
    targets = [target, {**target, "metric": "test_loss", "value": args.loss_target}]
    rows: list[dict[str, Any]] = []
    whole_outcomes: dict[int, dict[str, np.ndarray]] = {}
    for step, path in chosen:
        for (size, seed), recompute in precise.items():
            evaluator = evaluation.Evaluator(model, splits.test, torch.device("cpu"), recompute)
            figures, outcome = evaluator(path)
            rows.append({"step": step, "size": size, "seed": seed, "samples": len(recompute.batches) * cfg.batch_size,
                         "test_accuracy": figures["test_accuracy"], "test_loss": figures["test_loss"],
                         "loss_sd": float(np.std(outcome["loss"].astype(float), ddof=1)),
                         "precise_bn_s": figures["precise_bn_s"], "eval_s": figures["eval_s"]})
            if size == WHOLE:
                whole_outcomes[step] = outcome
            print(json.dumps(rows[-1]), flush=True)
    report: dict[str, Any] = {"run_dir": str(args.run_dir), "measured_at": time.strftime("%Y-%m-%d %H:%M"),
                              "threads": args.threads, "test_samples": len(splits.test), "rows": rows, "sizes": {}}
    with tempfile.TemporaryDirectory() as scratch:
        outcomes = save_outcomes(whole_outcomes, Path(scratch) / "whole.npz")
        report["sizes"] = summarise(rows, args.sizes, targets, len(splits.test), outcomes)
    print(json.dumps(report["sizes"], indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


def crossings(rows: list[dict[str, Any]], target: dict[str, Any]) -> float | None:
    curve = sorted(rows, key=lambda r: r["step"])
    return crossing_step([r["step"] for r in curve], [r[target["metric"]] for r in curve], target)


def summarise(rows: list[dict[str, Any]], sizes: list[int], targets: list[dict[str, Any]], test_samples: int,
              whole_outcomes: Path) -> dict[str | int, Any]:
    """Per size, over steps and draws: the largest and mean absolute difference from the whole split, and the
    largest in units of the test set's standard error at that step; per target (the run's and a test_loss one),
    each draw's crossing step against the whole split's as |log ratio|, beside the latter's bootstrap log sd."""
    whole = {r["step"]: r for r in rows if r["size"] == WHOLE}
    noise = {step: {"accuracy_se": max((r["test_accuracy"] * (1 - r["test_accuracy"]) / test_samples) ** 0.5,
                                       1 / test_samples),  # at least one test sample
                    "loss_se": r["loss_sd"] / test_samples ** 0.5} for step, r in whole.items()}
    by_size: dict[str | int, Any] = {
        WHOLE: {"precise_bn_s": statistics.fmean(r["precise_bn_s"] for r in whole.values()), "targets": {}}}
    for target in targets:
        name = f"{target['metric']} {target['value']}"
        curve = Curve(sorted(whole.values(), key=lambda r: r["step"]), target["metric"])
        spread = bootstrap({0: curve}, {0: whole_outcomes}, target | {"bootstrap": 1000}, lambda _, step: step, True)
        by_size[WHOLE]["targets"][name] = {"crossing_step": crossings(list(whole.values()), target),
                                          "bootstrap_log_sd": spread["log_sd"] if spread else None}
    for size in sizes:
        arm = [r for r in rows if r["size"] == size]
        accuracy = [abs(r["test_accuracy"] - whole[r["step"]]["test_accuracy"]) for r in arm]
        loss = [abs(r["test_loss"] - whole[r["step"]]["test_loss"]) for r in arm]
        figures = {
            "max_abs_accuracy_diff": max(accuracy), "mean_abs_accuracy_diff": statistics.fmean(accuracy),
            "max_abs_loss_diff": max(loss), "mean_abs_loss_diff": statistics.fmean(loss),
            "max_accuracy_diff_in_se": max(a / noise[r["step"]]["accuracy_se"] for a, r in zip(accuracy, arm)),
            "max_loss_diff_in_se": max(d / noise[r["step"]]["loss_se"] for d, r in zip(loss, arm)),
            "precise_bn_s": statistics.fmean(r["precise_bn_s"] for r in arm), "targets": {},
        }
        for target in targets:
            name = f"{target['metric']} {target['value']}"
            reference = by_size[WHOLE]["targets"][name]["crossing_step"]
            steps = [crossings([r for r in arm if r["seed"] == seed], target) for seed in sorted({r["seed"] for r in arm})]
            figures["targets"][name] = {"crossing_steps": steps, "abs_log_ratios": [  # None: one of them censored
                abs(math.log(step / reference)) if step and reference else (0.0 if step == reference else None)
                for step in steps]}
        by_size[size] = figures
    by_size["test_noise_by_step"] = noise
    return by_size


if __name__ == "__main__":
    main()
