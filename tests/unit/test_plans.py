"""A report over several sweep folders: one plan's blocks pool (the same plan id, further blocks and seeds); sweeps
of different plans, whose blocks reran the same seeds, get no verdict, saying which folders and plan ids (unit tier:
run folders written here, reported by metrics.report.build_report)."""
import math
import shutil

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
    order = [{"block": b, "job": f"block{b}/{name}"} for b in blocks for name in found]
    write_sweep(path, {}, plan={"declaration": {"blocks": blocks.stop}, "order": order}
                | ({"id": plan_id} if plan_id else {}))
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


# --- the plan enforced: its declared blocks, its runs, its reruns; nothing pooled without it ------------------------

RING = [1.05, 1.50, 1.26]    # ring's speed-up in a first sweep's blocks: 3 blocks cannot tell
AGAIN = [1.48, 1.07, 1.25]   # and in a second sweep's, the same seeds


def ring_jobs(ratios: list[float]) -> dict:
    return {"strategy=ring": [("ring", 2, 1, 100.0, BASELINE_TIMES[b] / r, {}) for b, r in enumerate(ratios)],
            "baseline_2x1": [("single", 2, 1, 100.0, BASELINE_TIMES[b], {}) for b in range(len(ratios))],
            "baseline_1x1": [("single", 1, 1, 60.0, 15.0, {}) for _ in ratios]}


def order(blocks: int, names=("strategy=ring", "baseline_2x1", "baseline_1x1")) -> list[dict]:
    """The plan's jobs, as the sweeper lists them: each job in every declared block."""
    return [{"block": b, "job": f"block{b}/{name}"} for b in range(blocks) for name in names]


def six_blocks(ratios: list[float]) -> str:
    """Geometric mean and 95 % t-interval of six ratios by hand (t(0.975, 5) = 2.570582), as the report prints."""
    logs = [math.log(r) for r in ratios]
    centre = sum(logs) / 6
    half = 2.570582 * math.sqrt(sum((x - centre) ** 2 for x in logs) / 5) / math.sqrt(6)
    return (f"{math.exp(centre):.2f}× [{math.exp(centre - half):.2f}, {math.exp(centre + half):.2f}] "
            f"(×/÷{math.exp(half):.2f}, 6 blocks)")


def claims_of(markdown: str) -> list[str]:
    """The comparisons table's claim column."""
    table = markdown.split("### Comparisons (declared before the data)")[1].split("\n### ")[0]
    rows = [line.strip("|").split("|") for line in table.splitlines() if line.startswith("| ")][1:]
    return [row[6].strip() for row in rows if not row[0].startswith("---")]


def test_under_a_refused_verdict_nothing_is_worded_as_a_claim(tmp_path):
    """Two 3-block sweeps of ring (1.26x, each alone: cannot tell), reported together: no verdict, and neither the
    findings, the comparisons table nor report.html word their pooled 6 blocks as "faster"."""
    first = write_sweep(tmp_path / "first", ring_jobs(RING), plan={"id": "aaa"})
    second = write_sweep(tmp_path / "second", ring_jobs(AGAIN), plan={"id": "bbb"})
    out = tmp_path / "out"
    markdown = report_of(first, second, out=out)
    assert answer(first, second, out=tmp_path / "again").startswith("**No verdict: the sweeps ")
    finding = next(line for line in markdown.splitlines() if line.startswith("- ring 2×1cpu: "))
    assert finding.endswith(f"against single 2×1cpu: withheld (no verdict): {six_blocks(RING + AGAIN)}")
    assert claims_of(markdown) == ["withheld"]
    page = (out / "report.html").read_text()
    assert "faster:" not in page and ">faster<" not in page


def test_runs_without_their_plan_files_are_never_pooled_by_block_index(tmp_path):
    """The same two sweeps with their plan files lost: each sweep's blocks stay its own (6 blocks, not 3 averaged
    per block index), their repeated seeds and the missing plans refuse the verdict."""
    first = write_sweep(tmp_path / "first", ring_jobs(RING))
    second = write_sweep(tmp_path / "second", ring_jobs(AGAIN))
    for sweep in (first, second):
        (sweep / ".avgbench" / "sweep.json").unlink()
    markdown = report_of(first, second, out=tmp_path / "out")
    found = answer(first, second, out=tmp_path / "again")
    assert found.startswith("**No verdict: 18 runs of blocks without their sweep's plan file (.avgbench/sweep.json)")
    assert "2 blocks of ring 2×1cpu ran seed 0 (not independent)" in found
    finding = next(line for line in markdown.splitlines() if line.startswith("- ring 2×1cpu: "))
    assert finding.endswith(f"against single 2×1cpu: withheld (no verdict): {six_blocks(RING + AGAIN)}")


def interim(sweep, complete: int, declared: int, missing: int, listed: str) -> str:
    return (f"**No verdict: {sweep}: {complete} of its {declared} declared blocks complete; no run in {missing} planned "
            f"job folders ({listed}): an interim look, not a verdict.**")


def test_a_sweep_reported_before_its_declared_blocks_are_done_is_interim(tmp_path):
    """A plan of 10 blocks reported after 4 (ring 1.5x in each): no verdict, an interim look."""
    sweep = write_sweep(tmp_path / "sweep", ring_jobs([1.5, 1.52, 1.48, 1.5]),
                        plan={"declaration": {"blocks": 10}, "order": order(10)})
    assert answer(sweep, out=tmp_path / "out") == interim(
        sweep, 4, 10, 18, "block4/baseline_1x1, block4/baseline_2x1, block4/strategy=ring, …")


def test_deleted_blocks_or_one_configurations_folders_refuse_the_verdict(tmp_path):
    """10 declared blocks, all run: deleting blocks 2, 5 and 7, or only ring's folders in blocks 4-9, is no
    verdict."""
    ratios = [1.5, 1.52, 1.48, 1.5, 1.51, 1.49]
    jobs = {name: runs * 2 for name, runs in ring_jobs(ratios[:5]).items()}
    holes = write_sweep(tmp_path / "holes", jobs, plan={"declaration": {"blocks": 10}, "order": order(10)})
    for block in (2, 5, 7):
        shutil.rmtree(holes / f"block{block}")
    assert answer(holes, out=tmp_path / "a") == interim(
        holes, 7, 10, 9, "block2/baseline_1x1, block2/baseline_2x1, block2/strategy=ring, …")
    ring_gone = write_sweep(tmp_path / "ring_gone", jobs, plan={"declaration": {"blocks": 10}, "order": order(10)})
    for block in range(4, 10):
        shutil.rmtree(ring_gone / f"block{block}" / "strategy=ring")
    assert answer(ring_gone, out=tmp_path / "b") == interim(
        ring_gone, 4, 10, 6, "block4/strategy=ring, block5/strategy=ring, block6/strategy=ring, …")


def test_blocks_beyond_the_plan_or_reruns_without_a_record_refuse_the_verdict(tmp_path):
    """A fourth block under a plan of 3, or an attempt moved aside that the plan's reruns do not list: no verdict."""
    extra = write_sweep(tmp_path / "extra", ring_jobs([1.5, 1.52, 1.48, 1.5]),
                        plan={"declaration": {"blocks": 3}, "order": order(3)})
    assert answer(extra, out=tmp_path / "a") == (
        f"**No verdict: {extra}: 3 of its 3 declared blocks complete; 3 runs its plan does not list, as planned or "
        "rerun (block3/baseline_1x1, block3/baseline_2x1, block3/strategy=ring).**")
    rerun = write_sweep(tmp_path / "rerun", ring_jobs([1.5, 1.52, 1.48]))
    write_report_run(rerun / "superseded" / "t0" / "block1" / "strategy=ring", "ring", 2, 100.0, None, block=1,
                     status="failed")
    assert answer(rerun, out=tmp_path / "b") == (
        f"**No verdict: {rerun}: 3 of its 3 declared blocks complete; 1 run its plan does not list, as planned or "
        "rerun (superseded/t0/block1/strategy=ring).**")
