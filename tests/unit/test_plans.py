"""A report over several sweep folders: one plan's blocks pool (the same plan id, further blocks and seeds); sweeps
of different plans, whose blocks reran the same seeds, get no verdict, saying which folders and plan ids (unit tier:
run folders written here, reported by metrics.report.build_report)."""
import math

import pytest

from helpers import report_of, write_report_run, write_sweep

pytestmark = pytest.mark.timeout(60)

BASELINE_TIMES = [10.0, 11.0, 10.5, 10.2, 10.8, 10.4]  # the equal-resource baseline's time-to-target per block (s)
RATIOS = [1.10, 1.30, 1.15, 1.25, 1.05, 1.20]           # the configuration's speed-up in each block


def jobs(plan_id: str | None, blocks: range) -> dict:
    """stepwise on 2 peers and its baselines in these blocks (seed = block, as the sweeper runs them)."""
    config = {"plan": plan_id} if plan_id else {}
    return {"strategy=stepwise": [("stepwise", 2, 1, 100.0, BASELINE_TIMES[b] / RATIOS[b], {"config": config})
                                  for b in blocks],
            "baseline_2x1": [("single", 2, 1, 100.0, BASELINE_TIMES[b], {"config": config}) for b in blocks],
            "baseline_1x1": [("single", 1, 1, 60.0, 15.0, {"config": config}) for b in blocks]}


def sweep_of(path, plan_id: str | None, blocks: range):
    """A sweep folder holding these blocks of a plan (write_sweep numbers blocks from 0: later ones written here)."""
    found = jobs(plan_id, blocks)
    write_sweep(path, {}, plan={"id": plan_id} if plan_id else {})
    for name, runs in found.items():
        for block, (strategy, peers, cpus, throughput, ttt, extra) in zip(blocks, runs):
            write_report_run(path / f"block{block}" / name, strategy, peers, throughput, ttt, cpus, block, **extra)
    return path


def answer(*dirs, out) -> str:
    return next(line for line in report_of(*dirs, out=out).split("## Verdict")[1].splitlines()
                if line.startswith("**"))


def test_sweeps_of_different_plans_with_the_same_seeds_make_no_claim(tmp_path):
    """Two 3-block sweeps, seeds 0-2 each: each alone cannot tell; together they must not count 6 independent
    blocks (today's report claimed "faster" over 6 blocks)."""
    first = sweep_of(tmp_path / "first", "aaa", range(3))
    second = sweep_of(tmp_path / "second", "bbb", range(3))
    assert "no averaging configuration is shown faster" in answer(first, out=tmp_path / "out1")
    merged = answer(first, second, out=tmp_path / "out2")
    assert merged == (f"**No verdict: the sweeps {first} (plan aaa), {second} (plan bbb) are not one plan: their "
                      "blocks were not planned together (seeds may repeat); report each sweep alone.**")


def test_sweeps_without_plan_ids_that_repeat_seeds_make_no_claim(tmp_path):
    first, second = sweep_of(tmp_path / "first", None, range(3)), sweep_of(tmp_path / "second", None, range(3))
    merged = answer(first, second, out=tmp_path / "out")
    assert merged.startswith(f"**No verdict: the sweeps {first} (plan without an id), {second} (plan without an id) "
                             "are not one plan")


def test_one_plan_continued_in_another_folder_pools_its_blocks(tmp_path):
    """Blocks 0-2 in one folder and 3-5 (seeds 3-5) in another, under one plan id: six paired blocks, the
    interval computed here by hand over the six ratios (t(0.975, 5) = 2.570582)."""
    first, second = sweep_of(tmp_path / "first", "aaa", range(3)), sweep_of(tmp_path / "second", "aaa", range(3, 6))
    logs = [math.log(r) for r in RATIOS]
    centre = sum(logs) / 6
    half = 2.570582 * math.sqrt(sum((x - centre) ** 2 for x in logs) / 5) / math.sqrt(6)
    found = answer(first, second, out=tmp_path / "out")
    assert f"{math.exp(centre):.2f}× [{math.exp(centre - half):.2f}, {math.exp(centre + half):.2f}]" in found
    assert "6 blocks" in found


def test_blocks_of_one_plan_that_repeat_a_seed_are_not_independent(tmp_path):
    """A sweep whose blocks ran one seed (no plan id, written by hand) gets no verdict, saying so."""
    sweep = sweep_of(tmp_path / "sweep", None, range(3))
    for path in sweep.glob("block*/*/summary.json"):
        path.write_text(path.read_text().replace('"seed": 1,', '"seed": 0,').replace('"seed": 2,', '"seed": 0,'))
    found = answer(sweep, out=tmp_path / "out")
    assert found.startswith("**No verdict: 3 blocks of ") and "ran seed 0 (not independent)" in found
