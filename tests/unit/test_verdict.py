"""The verdict on run folders written here (unit tier: no training, no process): one primary figure declared
before the data, misses censored, the declared comparisons, the control arm, honest intervals, attempts kept.

Each scenario is a multirun's directory as the sweeper leaves it (tests/helpers.py write_sweep), reported by
metrics.report.build_report; the expected intervals are computed here by hand for three blocks (df = 2, where
Student's t has a closed form: quantile(p) = (2p - 1) / sqrt(2 p (1 - p)), so t(0.975, 2) = 4.302653).
"""
import csv
import json
import shutil
import math
import re
import statistics

import pytest
from scipy.stats import ttest_1samp

from helpers import report_config, report_of, write_report_run, write_sweep
from metrics.report.formats import interval_text
from metrics.report.stats import Ratio
from metrics.summary.schema import Summary

pytestmark = pytest.mark.timeout(60)

T_975_DF2 = 4.302653
BASELINE_TIMES = [10.0, 11.0, 10.5]  # the equal-resource baseline's time-to-target per block (s)


def blocks(strategy: str, peers: int, throughputs: list[float], times: list[float | None], cpus: int = 1,
           **extra) -> list[tuple]:
    """A job's runs, one per block (write_sweep's format)."""
    return [(strategy, peers, cpus, t, x, extra) for t, x in zip(throughputs, times)]


def baselines(times: list[float] = BASELINE_TIMES, **extra) -> dict:
    """The equal-resource baseline (2 CPUs) and the one-peer reference, as the sweeper adds them."""
    return {"baseline_2x1": blocks("single", 2, [100.0] * len(times), times, **extra),
            "baseline_1x1": blocks("single", 1, [60.0] * len(times), [15.0] * len(times), **extra)}


def verdict_of(markdown: str) -> str:
    return markdown.split("## Verdict")[1].split("\n## ")[0]


def line_of(verdict: str, label: str) -> str:
    """The finding under the answer for one configuration."""
    return next(line for line in verdict.splitlines() if line.startswith(f"- {label}: "))


def caveats_of(markdown: str) -> str:
    """The caveats' details, under the verdict: one line per run, under its kind's counted line."""
    return markdown.split("### Caveats")[1].split("\n### ")[0]


def answer_of(verdict: str) -> str:
    return re.search(r"^\*\*(.*)\*\*$", verdict, re.M)[1]


def entry_of(verdict: str, label: str) -> str:
    return re.search(rf"^\d+\. \*\*{re.escape(label)}\*\*: (.*)$", verdict, re.M)[1]


def rows_of(out) -> list[dict]:
    with open(out / "runs.csv", newline="") as f:
        return list(csv.DictReader(f))


def interval(ratios: list[float]) -> tuple[float, float, float]:
    """Geometric mean and 95 % t-interval of three ratios, by hand."""
    logs = [math.log(r) for r in ratios]
    centre = sum(logs) / 3
    sd = math.sqrt(sum((x - centre) ** 2 for x in logs) / 2)
    half = T_975_DF2 * sd / math.sqrt(3)
    return math.exp(centre), math.exp(centre - half), math.exp(centre + half)


# --- the scenarios: each failed on the report code before this one ------------------------------

def test_a_miss_with_more_throughput_is_no_win_and_the_report_agrees_with_itself(tmp_path):
    """Stepwise misses the target in 1 of 3 blocks, takes twice the baseline's time in the others and has 1.5x its
    throughput: the verdict is on time-to-target alone, the miss censored at its horizon, and stepwise is slower."""
    sweep = write_sweep(tmp_path / "sweep", {
        "strategy=stepwise": blocks("stepwise", 2, [150.0, 153.0, 147.0], [20.0, None, 21.5]), **baselines()})
    verdict = verdict_of(report_of(sweep, out=tmp_path / "out"))
    assert " is faster than" not in verdict and "faster:" not in verdict
    assert verdict.index("**Answer: no averaging configuration is shown faster than one process on the same CPUs in "
                         "time-to-target to test_accuracy ≥ 0.9. Every one is slower") < \
        verdict.index("Primary figure (declared before the first run): time-to-target (test_accuracy ≥ 0.9")
    # block 1's horizon: its evaluation before the last, at 3/4 of 4000 samples / 153 samples/s: the ratio at most
    expected = Ratio([10.0 / 20.0, 10.5 / 21.5], [(0.0, 11.0 / (0.75 * 4000 / 153.0))])
    assert line_of(verdict, "stepwise 2×1cpu") == (
        "- stepwise 2×1cpu: reached test_accuracy ≥ 0.9 in 2 of 3 blocks; against single 2×1cpu: slower: "
        f"{interval_text(expected)}")
    assert "3 blocks, 1 censored" in interval_text(expected)
    assert "signed-rank" not in verdict
    assert "throughput speedup 1.50× [" in entry_of(verdict, "stepwise 2×1cpu")
    assert "vs single 2×1cpu (beside the primary figure)" in entry_of(verdict, "stepwise 2×1cpu")


def test_a_censored_configuration_never_ranks_ahead_of_one_that_reached_every_time(tmp_path):
    """Stepwise reaches the target faster than allreduce where it reaches it and has more throughput, but misses it
    once; allreduce reaches it in every block. MLPerf's summary stands beside the censored estimate."""
    sweep = write_sweep(tmp_path / "sweep", {
        "strategy=stepwise": blocks("stepwise", 2, [150.0, 151.0, 149.0], [6.0, 6.5, None]),
        "strategy=allreduce": blocks("allreduce", 2, [100.0, 99.0, 101.0], [11.0, 12.0, 11.5]), **baselines()})
    verdict = verdict_of(report_of(sweep, out=tmp_path / "out"))
    ranked = re.findall(r"^\d+\. \*\*(.+?)\*\*", verdict, re.M)
    assert ranked.index("allreduce 2×1cpu") < ranked.index("stepwise 2×1cpu")
    assert "faster:" not in verdict and " is faster than" not in verdict
    assert line_of(verdict, "stepwise 2×1cpu").startswith("- stepwise 2×1cpu: reached test_accuracy ≥ 0.9 in 2 of 3 "
                                                          "blocks; against single 2×1cpu: cannot tell")
    # MLPerf: the olympic mean over blocks, the miss the slowest: the middle of 6.0, 6.5 and the miss; each
    # entry names it as the figure it is ranked on, beside the mean that disagrees with the order (6.25 s, 11.5 s)
    assert "ranked on MLPerf-style time-to-target 6.5 s" in entry_of(verdict, "stepwise 2×1cpu")
    assert "ranked on MLPerf-style time-to-target 11.5 s" in entry_of(verdict, "allreduce 2×1cpu")


def test_zero_spread_is_no_interval_and_no_claim(tmp_path):
    """The same ratio (1.5) in both blocks: no spread to measure, so no interval and no test (not p = 0)."""
    sweep = write_sweep(tmp_path / "sweep", {"strategy=allreduce": blocks("allreduce", 2, [100.0, 100.0], [8.0, 16.0]),
                                             **baselines([12.0, 24.0])})
    verdict = verdict_of(report_of(sweep, out=tmp_path / "out"))
    assert " is faster than" not in verdict and "faster:" not in verdict
    assert line_of(verdict, "allreduce 2×1cpu").endswith(
        "against single 2×1cpu: 1.50× (2 blocks, zero spread: no interval): no result")


def test_a_crossing_at_the_first_evaluation_is_a_crossing(tmp_path):
    """Time-to-target 0 (the target met at the first evaluation) counts as reached, and its block counts in the
    comparison on time-to-target: censored between the start and the next evaluation, the fastest in rank."""
    sweep = write_sweep(tmp_path / "sweep", {"strategy=allreduce": blocks("allreduce", 2, [100.0] * 3, [0.0, 9.0, 9.5]),
                                             **baselines()})
    out = tmp_path / "out"
    verdict = verdict_of(report_of(sweep, out=out))
    assert "time-to-target" in answer_of(verdict) and "throughput" not in answer_of(verdict)
    finding = line_of(verdict, "allreduce 2×1cpu")
    assert finding.startswith("- allreduce 2×1cpu: reached test_accuracy ≥ 0.9 in 3 of 3 blocks; against single "
                              "2×1cpu: ")
    # block 0 crossed before its next evaluation (10 s): the ratio at least the baseline's 10 s / 10 s
    assert finding.endswith(interval_text(Ratio([11.0 / 9.0, 10.5 / 9.5], [(1.0, math.inf)])))
    assert finding.endswith("3 blocks, 1 censored)")
    zero = next(r for r in rows_of(out) if r["config.strategy.name"] == "allreduce" and r["config.block"] == "0")
    assert zero["reached_target"] == "True" and json.loads(zero["time_to_target_bounds_s"]) == [0.0, 10.0]


def test_every_pair_is_declared_and_none_is_chosen_from_the_ranking(tmp_path):
    """Stepwise's failed first run crossed early: unpaired means put it first, though ring is the faster wherever
    both completed. Every pair of configurations is compared, all in one Holm family; nothing "reaches first"."""
    failed = {"status": "failed"}
    sweep = write_sweep(tmp_path / "sweep", {
        "strategy=stepwise": [("stepwise", 2, 1, 100.0, 1.0, failed), *blocks("stepwise", 2, [100.0] * 2,
                                                                              [12.0, 12.5])],
        "strategy=ring": blocks("ring", 2, [100.0] * 3, [10.0, 10.2, 9.9]),
        "strategy=ps": blocks("ps", 2, [90.0] * 3, [14.0, 15.0, 14.5]), **baselines()})
    markdown = report_of(sweep, out=tmp_path / "out")
    verdict = verdict_of(markdown)
    assert "first" not in answer_of(verdict)
    assert "needs p < 0.05 after Holm's correction over the 6 comparisons declared" in verdict
    table = markdown.split("### Comparisons (declared before the data)")[1].split("\n### ")[0]
    pairs = re.findall(r"^\| ([^|]+?) \| ([^|]+?) \| ", table, re.M)[1:]
    assert pairs == [("ps 2×1cpu", "single 2×1cpu"), ("ring 2×1cpu", "single 2×1cpu"),
                     ("stepwise 2×1cpu", "single 2×1cpu"), ("ps 2×1cpu", "ring 2×1cpu"),
                     ("ps 2×1cpu", "stepwise 2×1cpu"), ("ring 2×1cpu", "stepwise 2×1cpu")]
    assert line_of(verdict, "stepwise 2×1cpu").startswith("- stepwise 2×1cpu: reached test_accuracy ≥ 0.9 in 2 of 3")


def test_a_control_arm_whose_interval_excludes_one_forbids_every_claim(tmp_path):
    """Allreduce is 1.5x faster than the baseline in every block, but the baseline's second run in each block (the
    control arm) is 1.3x slower than its first: the blocks are not comparable, and the verdict claims nothing."""
    control = {"config": {"arm": "control"}}
    sweep = write_sweep(tmp_path / "sweep", {
        "strategy=allreduce": blocks("allreduce", 2, [100.0] * 3, [t / r for t, r in zip(BASELINE_TIMES,
                                                                                            (1.50, 1.53, 1.47))]),
        "baseline_2x1_control": blocks("single", 2, [100.0] * 3, [t * r for t, r in zip(BASELINE_TIMES,
                                                                                         (1.30, 1.32, 1.28))],
                                       **control), **baselines()})
    verdict = verdict_of(report_of(sweep, out=tmp_path / "out"))
    # the control's sd floored at the section's pooled noise (allreduce against the baseline)
    floor = statistics.stdev(math.log(r) for r in (1.50, 1.53, 1.47))
    low, high = Ratio([1.30, 1.32, 1.28], sd_floor=floor).interval()
    estimate = math.exp(statistics.fmean(math.log(r) for r in (1.30, 1.32, 1.28)))
    assert answer_of(verdict).startswith(
        "No claim: the blocks are not comparable. The control arm (the same one-process run twice in every block) "
        f"differs from itself: single 2×1cpu against its second run: {estimate:.2f}× [{low:.2f}, {high:.2f}]")
    assert " is faster than" not in answer_of(verdict)
    assert ("Control arm (the equal-resource baseline run twice in every block, the noise floor; > 1: the first run "
            f"was the faster): single 2×1cpu against its second run: {estimate:.2f}× [{low:.2f}, {high:.2f}] (×/÷"
            ) in verdict
    assert "differs from 1 after Holm's correction: runs in one block are not comparable" in verdict


def test_under_a_control_arm_that_excludes_one_no_finding_is_worded_as_a_claim(tmp_path):
    """The control arm's interval excludes 1 ("No claim"): allreduce's 1.5x win is withheld in the findings, the
    entries, the comparisons table and report.html, as under a refused plan."""
    control = {"config": {"arm": "control"}}
    sweep = write_sweep(tmp_path / "sweep", {
        "strategy=allreduce": blocks("allreduce", 2, [100.0] * 3, [t / r for t, r in zip(BASELINE_TIMES,
                                                                                            (1.50, 1.53, 1.47))]),
        "baseline_2x1_control": blocks("single", 2, [100.0] * 3, [t * r for t, r in zip(BASELINE_TIMES,
                                                                                         (1.30, 1.32, 1.28))],
                                       **control), **baselines()})
    out = tmp_path / "out"
    markdown = report_of(sweep, out=out)
    verdict = verdict_of(markdown)
    estimate, low, high = interval([1.50, 1.53, 1.47])
    assert answer_of(verdict).startswith("No claim: the blocks are not comparable.")
    assert line_of(verdict, "allreduce 2×1cpu").endswith(
        f"against single 2×1cpu: withheld (no verdict): {estimate:.2f}× [{low:.2f}, {high:.2f}] "
        f"(×/÷{math.sqrt(high / low):.2f}, 3 blocks)")
    table = markdown.split("### Comparisons (declared before the data)")[1].split("\n### ")[0]
    findings = [line for line in verdict.splitlines() if re.match(r"- |\d+\. ", line)]
    assert findings and not any("faster" in line for line in findings)
    rows = [line.strip("|").split("|") for line in table.splitlines() if line.startswith("| ")][1:]
    assert [row[6].strip() for row in rows if not row[0].startswith("---")] == ["withheld", "control: differs from 1"]
    page = (out / "report.html").read_text()
    assert "faster:" not in page and ">faster<" not in page


def test_the_report_says_what_the_plan_planned_on(tmp_path):
    """A plan made on a machine without its own noise rows says so in the report: a conservative prior."""
    power = {"effect": 1.25, "blocks": 3, "comparisons": 1, "log_sd": 0.3, "df": 2, "log_sd_upper": 1.33,
             "power": 0.05, "power_at_estimate": 0.2, "noise": "conservative prior"}
    sweep = write_sweep(tmp_path / "sweep", {
        "strategy=stepwise": blocks("stepwise", 2, [100.0] * 3, [t / 1.5 for t in BASELINE_TIMES]), **baselines()},
        plan={"declaration": {"power": {"data=digits, model=tiny": power}}})
    verdict = verdict_of(report_of(sweep, out=tmp_path / "out"))
    assert (f"Planned on a conservative prior (no noise recorded on the machine planned for: 2.5 × the noisiest "
            f"recorded row of any machine, taken as its upper bound): the plan of {sweep} chose 3 blocks at log-sd "
            "0.300 (95 % upper bound 1.330), 5% power at ×/÷1.25.") in verdict


def test_a_blocks_first_attempt_counts_and_its_retry_stands_beside_it(tmp_path):
    """Block 1's ring failed (after its first evaluations), was retried in its block and completed at 9.5 s: the
    failed first attempt counts, at its horizon (30 s, never ahead of the baseline's 11 s), so a retry's luckier draw
    cannot help ring; the retry is reported beside it, and runs.csv keeps both."""
    attempt = "superseded/2026-01-01_00-00-00_retry/block1/strategy=ring"
    sweep = write_sweep(tmp_path / "sweep", {"strategy=ring": blocks("ring", 2, [100.0] * 3, [7.0, 9.5, 7.2]),
                                             **baselines()},
                        plan={"reruns": [{"job": "block1/strategy=ring", "attempts": [attempt]}]})
    write_report_run(sweep / attempt, "ring", 2, 100.0, None, block=1, status="failed")
    out = tmp_path / "out"
    markdown = report_of(sweep, out=out)
    verdict = verdict_of(markdown)
    rows = [r for r in rows_of(out) if r["config.strategy.name"] == "ring"]
    assert sorted((r["config.block"], r["attempt"], r["status"]) for r in rows) == [
        ("0", "current", "completed"), ("1", "run later, not counted", "completed"), ("1", "superseded", "failed"),
        ("2", "current", "completed")]
    assert line_of(verdict, "ring 2×1cpu") == (
        "- ring 2×1cpu: reached test_accuracy ≥ 0.9 in 2 of 3 blocks; against single 2×1cpu: cannot tell: "
        + interval_text(Ratio([10.0 / 7.0, 10.5 / 7.2], [(0.0, 11.0 / 30.0)])))
    entry = entry_of(verdict, "ring 2×1cpu")
    assert "[⚠ 1 run failed](#s1-caveat-failed)" in entry and "[⚠ 1 rerun not counted (a block's" in entry
    caveats = caveats_of(markdown)
    assert ("- block 1, ring 2×1cpu: failed (seed 1): Traceback (most recent call last): … RuntimeError: ring failed "
            "in block 1") in caveats
    assert ("**1 rerun not counted (a block's first attempt counts)**\n\n"
            "- block 1, ring 2×1cpu: completed, reached the target at 9.5 s") in caveats
    assert "ring 2×1cpu superseded attempt block=1" in markdown.split("## Errors")[1]


# --- what the verdict may say ---------------------------------------------------------------------

def test_paired_blocks_cancel_drift_and_a_clear_win_is_called_faster(tmp_path):
    ratios = [1.50, 1.53, 1.47]
    drift = [1.0, 2.0, 3.0]  # the machine slows 3x between blocks: only paired ratios survive it
    sweep = write_sweep(tmp_path / "sweep", {
        "strategy=stepwise": blocks("stepwise", 2, [100.0] * 3, [10 * d / r for d, r in zip(drift, ratios)]),
        **baselines([10 * d for d in drift])})
    verdict = verdict_of(report_of(sweep, out=tmp_path / "out"))
    estimate, low, high = interval(ratios)
    assert low > 1.3
    assert answer_of(verdict) == (
        "Answer: stepwise 2×1cpu is faster than one process on the same 2 CPUs in time-to-target to test_accuracy ≥ "
        f"0.9: {estimate:.2f}× [{low:.2f}, {high:.2f}] (×/÷{math.sqrt(high / low):.2f}, 3 blocks).")


def test_the_noise_and_the_next_plans_detectable_ratio_use_the_primary_figure_and_holm(tmp_path):
    """Two configurations: 3 declared comparisons, 3 blocks. The noise is time-to-target's own (throughput varies 10x
    less here). By hand: the log ratios' sds are 0.1569 (stepwise 1.30, 0.95, 1.10) and 0.1440 (allreduce 1.05, 0.90,
    1.20), pooled over 2 + 2 df: 0.1506. A next plan of 3 blocks at Holm's first step (two-sided 0.05 / 3) and 80 %
    power: t(1 - 0.05 / 6, 2) = 7.6488 and t(0.8, 2) = 1.0607, so exp((7.6488 + 1.0607) x 0.1506 / sqrt(3)) = x/÷2.13;
    no post-hoc power of this sweep."""
    import html

    from scipy.stats import t

    ratios = {"stepwise": [1.30, 0.95, 1.10], "allreduce": [1.05, 0.90, 1.20]}
    sweep = write_sweep(tmp_path / "sweep", {
        f"strategy={name}": blocks(name, 2, [100.0 * (1 + 0.01 * k) for k in range(3)],
                                   [b / r for b, r in zip(BASELINE_TIMES, found)])
        for name, found in ratios.items()} | baselines(), plan={})
    out = tmp_path / "out"
    verdict = verdict_of(report_of(sweep, out=out))
    sds = [math.sqrt(sum((math.log(r) - sum(map(math.log, found)) / 3) ** 2 for r in found) / 2)
           for found in ratios.values()]
    pooled = math.sqrt(sum(sd * sd for sd in sds) / 2)
    factor = math.exp((t.ppf(1 - 0.05 / 3 / 2, 2) + t.ppf(0.8, 2)) * pooled / math.sqrt(3))
    assert round(pooled, 4) == 0.1506 and round(factor, 2) == 2.13
    assert (f"Noise of time-to-target: the paired ratios vary by {pooled:.1%} (sd of their logs, pooled over the "
            f"comparisons with the baselines and the control arm, blocks observed exactly).") in verdict
    line = (f"Next plan: on the noise this sweep measured (log-sd {pooled:.3f} on 4 degrees of freedom), 3 blocks "
            f"detect a ratio beyond ×/÷2.13 at 80% power, two-sided 5% after Holm over 3 declared comparisons")
    assert line in verdict and html.escape(line) in (out / "report.html").read_text()
    assert "power of this sweep" not in verdict and "±" not in verdict.split("Noise")[1].split("\n")[0]


def test_no_faster_only_from_equivalence(tmp_path):
    sweep = write_sweep(tmp_path / "sweep", {
        "strategy=ps": blocks("ps", 2, [100.0] * 3, [t / r for t, r in zip(BASELINE_TIMES, (0.99, 1.01, 1.0))]),
        **baselines()})
    verdict = verdict_of(report_of(sweep, out=tmp_path / "out"))
    assert "against single 2×1cpu: no faster (equivalent within ×/÷1.25, TOST; 90 % interval [" in \
        line_of(verdict, "ps 2×1cpu")


def emulated_link(goodput_mbit: float | None, nominal_mbit: float = 150.0, worst: str = "host 0 egress") -> dict:
    """summary.json's link section (metrics/summary/link.py) of a run on emulated links of nominal_mbit each way, its
    worst direction carrying goodput_mbit while busy (None: no direction was busy long enough to judge)."""
    judged = goodput_mbit is not None
    directions = [{"host": h, "direction": d, "nominal_mbit": nominal_mbit, "carried_bytes": 10**7,
                   "busy_bytes": 10**6, "busy_s": 2.0 if judged else 0.2, "goodput_mbit": goodput_mbit}
                  for h in (0, 1) for d in ("egress", "ingress")]
    return {"kind": "emulated", "asked": "auto", "scope": "per-host", "hosts": 2, "latency_ms": 0.0,
            "nominal_mbit": nominal_mbit, "goodput_mbit": goodput_mbit,
            "goodput_share": goodput_mbit / nominal_mbit if judged else None, "busy_s": 2.0 if judged else 0.2,
            "worst_direction": worst if judged else None,
            "faithful": goodput_mbit / nominal_mbit >= 0.9 if judged else None, "reason": "as metered",
            "by_direction": directions}


def measured_on(link: dict, comm_shares: list[float]) -> list[dict]:
    """write_report_run's extra arguments of a job's runs, one per block: its link and communication share."""
    return [{"summary": {"link": link, "time_breakdown_share": {"data_s": 0.1, "compute_s": 0.9 - c, "opt_s": 0.0,
                                                                "comm_s": c}}} for c in comm_shares]


ONE_PROCESS = {"kind": "none", "asked": "auto", "scope": "none", "hosts": None, "latency_ms": 0.0,
               "nominal_mbit": None, "goodput_mbit": None, "goodput_share": None, "busy_s": None,
               "worst_direction": None, "faithful": None, "reason": "one process: nothing goes over a network"}


def with_extras(runs: list[tuple], extras: list[dict]) -> list[tuple]:
    return [run[:5] + (extra,) for run, extra in zip(runs, extras)]


def test_the_verdict_names_the_link_its_goodput_and_each_configurations_communication_share(tmp_path):
    """Ring and stepwise on emulated links of 150 Mbit/s each way (one stepwise run never busy long enough to judge
    its link), the baselines one process each (no link): the verdict names each configuration's link, the links'
    goodput over the section's runs and every configuration's communication share, as medians with their range."""
    ring = with_extras(blocks("ring", 2, [100.0] * 3, [9.0, 9.5, 9.2]),
                       [e for g, c in zip([140.0, 146.0, 137.0], [0.50, 0.60, 0.45])
                        for e in measured_on(emulated_link(g), [c])])
    stepwise = with_extras(blocks("stepwise", 2, [100.0] * 3, [8.0, 8.2, 8.1]),
                           [e for g, c in zip([149.0, None, 138.0], [0.30, 0.20, 0.25])
                            for e in measured_on(emulated_link(g), [c])])
    alone = {"summary": {"link": ONE_PROCESS, "time_breakdown_share": {"data_s": 0.1, "compute_s": 0.9, "opt_s": 0.0,
                                                                       "comm_s": 0.0}}}
    sweep = write_sweep(tmp_path / "sweep", {"strategy=ring": ring, "strategy=stepwise": stepwise,
                                             **baselines(**alone)})
    out = tmp_path / "out"
    verdict = verdict_of(report_of(sweep, out=out))
    # configurations in rank order (stepwise reaches the target first); the five judged goodputs: 137 ... 149
    link = ("Link of stepwise 2×1cpu, ring 2×1cpu (6 runs): emulated, one link per host, 150 Mbit/s nominal each "
            "way. Goodput while busy: median 140 Mbit/s (range 137–149 Mbit/s, 5 runs), not judged in 1 of 6 runs; "
            "per run, its link direction that did worst against its rate: the bytes its token bucket sent")
    assert link in verdict
    assert "Link of single 2×1cpu, single 1×1cpu (6 runs): none (one process)." in verdict
    shares = next(line for line in verdict.splitlines() if line.startswith("Communication's share of a step"))
    assert "(time_breakdown_share.comm_s: measured communication, 0 in a step that sent and received nothing" \
        in shares
    for figure in ("ring 2×1cpu median 50% (range 45–60%, 3 runs)", "stepwise 2×1cpu median 25% (range 20–30%, 3 runs)",
                   "single 2×1cpu 0% (all 3 runs)", "single 1×1cpu 0% (all 3 runs)"):
        assert figure in shares
    assert "differ only by their compute share" not in verdict
    import html

    page = html.unescape((out / "report.html").read_text())
    assert link in page and shares in page


def test_on_loopback_the_verdict_says_strategies_differ_only_by_compute_share(tmp_path):
    loopback = {"kind": "loopback", "asked": "auto", "scope": "shared", "hosts": None, "latency_ms": 0.0,
                "nominal_mbit": None, "goodput_mbit": None, "goodput_share": None, "busy_s": None,
                "worst_direction": None, "faithful": None, "reason": "no user namespaces"}
    sweep = write_sweep(tmp_path / "sweep", {
        "strategy=ring": with_extras(blocks("ring", 2, [100.0] * 3, [9.0, 9.5, 9.2]),
                                     measured_on(loopback, [0.04, 0.05, 0.06])), **baselines()})
    verdict = verdict_of(report_of(sweep, out=tmp_path / "out"))
    assert ("Link of ring 2×1cpu (3 runs): this machine's loopback, shared by all processes and unshaped: on "
            "loopback strategies differ only by their compute share.") in verdict
    assert "ring 2×1cpu median 5% (range 4–6%, 3 runs)" in verdict
    assert "Goodput" not in verdict  # an unshaped loopback has no rate to hold


def test_unfaithful_runs_are_left_out_one_line_each_with_the_figure_that_failed(tmp_path):
    """A run marked unfaithful (its CPU share, or its link's goodput) makes no claim: its block is left out, and
    the verdict lists each such run on a line of its own with the figure that failed."""
    isolation = {"summary": {"isolation": {"faithful": False, "unfaithful": ["rank 1 received 62 % of 1 CPU"]}}}
    link = {"summary": {"link": emulated_link(12.0, nominal_mbit=20.0, worst="host 1 ingress")}}
    runs = blocks("allreduce", 2, [100.0] * 4, [6.0, 6.1, 5.9, 6.0])
    runs[1] = runs[1][:5] + (isolation,)
    runs[3] = runs[3][:5] + (link,)
    sweep = write_sweep(tmp_path / "sweep", {"strategy=allreduce": runs, **baselines(BASELINE_TIMES + [10.2])})
    markdown = report_of(sweep, out=tmp_path / "out")
    verdict = verdict_of(markdown)
    assert ("**1 run on a contended CPU left out**\n\n"
            "- block 1, allreduce 2×1cpu: isolation: rank 1 received 62 % of 1 CPU\n") in caveats_of(markdown)
    assert ("**1 run on a link under its rate left out**\n\n"
            "- block 3, allreduce 2×1cpu: link: host 1 ingress carried 12 of 20 Mbit/s (60%) while busy\n"
            ) in caveats_of(markdown)
    assert "(×/÷" in line_of(verdict, "allreduce 2×1cpu") and ", 2 blocks)" in line_of(verdict, "allreduce 2×1cpu")


def test_a_sweep_resumed_under_another_plan_gets_no_verdict(tmp_path):
    changed = "this sweep's plan differs from the one its first runs were made under in primary"
    sweep = write_sweep(tmp_path / "sweep", {
        "strategy=stepwise": blocks("stepwise", 2, [100.0] * 3, [t / 1.5 for t in BASELINE_TIMES]), **baselines()},
        plan={"declaration": {"primary": {}, "comparisons": {}, "blocks": 3}, "changed": changed})
    verdict = verdict_of(report_of(sweep, out=tmp_path / "out"))
    assert answer_of(verdict) == f"No verdict: the plan of {sweep} changed after its first runs ({changed})."


def test_the_plan_names_the_primary_figure_and_the_order(tmp_path):
    primary = {"figure": "throughput", "metric": None, "value": None, "estimator": None, "declared": "throughput"}
    order = {"design": "williams", "jobs": 3, "sequences": 6, "blocks": 3, "balanced": False}
    declared = {"config": {"report": {"baseline_strategy": "single", "primary": "throughput"}}}
    sweep = write_sweep(tmp_path / "sweep", {"strategy=stepwise": blocks("stepwise", 2, [150.0, 155.0, 148.0],
                                                                         [None] * 3, **declared),
                                             **baselines(**declared)},
                        plan={"declaration": {"primary": {"data=digits, model=tiny": primary}, "blocks": 3,
                                              "comparisons": {"data=digits, model=tiny": [["a", "b"]]},
                                              "order": order}})
    verdict = verdict_of(report_of(sweep, out=tmp_path / "out"))
    assert "Primary figure (declared before the first run): throughput (all workers' samples / the longest " \
           "worker's training time, samples/s)." in verdict
    assert answer_of(verdict).startswith("Answer: stepwise 2×1cpu is faster than one process on the same 2 CPUs in "
                                         "throughput: 1.51× [")
    assert ("Order: a Williams design over the 3 jobs of a block (6 sequences, each job once in every position and "
            "after every other job once per set); 3 blocks do not complete a balanced set (a multiple of 6 blocks "
            "would)") in verdict


def test_html_and_markdown_come_from_one_model(tmp_path):
    """Both outputs render the same verdict sentences (the templates of one model)."""
    import html

    sweep = write_sweep(tmp_path / "sweep", {"strategy=stepwise": blocks("stepwise", 2, [150.0] * 3,
                                                                         [20.0, None, 21.0]), **baselines()})
    out = tmp_path / "out"
    verdict = verdict_of(report_of(sweep, out=out))
    page = html.unescape((out / "report.html").read_text())
    sentences = [answer_of(verdict), line_of(verdict, "stepwise 2×1cpu")[2:],
                 next(line for line in verdict.splitlines() if line.startswith("Control arm"))]
    assert all(sentence in page for sentence in sentences)
    assert page.index("<section id='verdict'>") < page.index("Answer:") < page.index("Method:") < \
        page.index("<h2>Methods</h2>")


def test_the_report_package_imports_nothing_above_metrics():
    """metrics/report/ and every metrics module it imports, followed to the end: no launchers, job, strategies,
    netemu or bench; the strategies' cost models (strategies/cost_models/<name>.py, no runtime) are followed too."""
    import ast

    from helpers import ROOT

    forbidden = ("launchers", "job", "strategies", "netemu", "bench", "hydra_plugins")

    def cost_model(name: str) -> bool:
        return name.startswith("strategies.cost_models")

    to_visit = sorted((ROOT / "metrics" / "report").glob("*.py"))
    seen, imported = set(), set()
    while to_visit:
        path = to_visit.pop()
        if path in seen:
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            for name in names:
                imported.add(name)
                if name.startswith("metrics.") or cost_model(name):
                    module = ROOT.joinpath(*name.split("."))
                    to_visit += [p for p in (module.with_suffix(".py"), module / "__init__.py") if p.exists()]
    assert not [name for name in imported if name.split(".")[0] in forbidden and not cost_model(name)]
    assert "metrics.report.runs" in imported and "metrics.recording.rundir" in imported  # the walk went through them


# --- a run over several nodes: its node folders are one run ---------------------------------------

def write_node(job, node: int, ranks: list[int], train_s: float, crossing_s: float, status: str = "completed",
               error: str | None = None, sent_per_sample: float = 1000.0, window: dict | None = None, **config):
    """Node `node`'s folder of a run over 2 nodes, as its launcher writes it: its own peers' logs (each worker 2000
    samples in 40 steps over train_s, evaluated every 10 steps, reaching 0.9 from crossing_s on) and a summary of its
    own peers only."""
    path = job / f"node{node}"
    conf = report_config("allreduce", 4, block=0, **config)
    conf["launch"] = {"nnodes": 2, "node_rank": node, "master_addr": conf.pop("master_addr", "10.0.0.2")}
    times = [train_s * k / 4 for k in range(5)]
    samples = 2000 * len(ranks)
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps({
        "status": status, "error": error, "exit_code": 0 if status == "completed" else 1, "config": conf,
        "is_baseline": False, "target": conf["target"], "total_samples": samples, "workers": len(ranks),
        "throughput_samples_per_s": samples / train_s, "time_to_target_s": crossing_s,
        "bytes_sent_per_sample": sent_per_sample, "started_at": 1000.0 + node, "wall_s": train_s,
        "time_to_target_by_rank": {str(r): crossing_s for r in ranks},
        "accuracy_by_worker": {"by_rank": {str(r): 0.9 for r in ranks}, "worst": 0.9},
        "shape": {"host": f"host{node}", "node_rank": node, "nnodes": 2, "cores": 8, "oversubscription": 0.25},
        "peers": [{"rank": r, "train_s": train_s, "samples": 2000, **({"window": window} if window else {})}
                  for r in ranks]}))
    for rank in ranks:
        peer = path / f"peer{rank}"
        peer.mkdir()
        (peer / "steps.jsonl").write_text("".join(
            json.dumps({"step": s, "samples": 50 * s, "train_s": train_s * s / 40, "loss": 1.0}) + "\n" for s in range(1, 41)))
        (peer / "eval.jsonl").write_text("".join(
            json.dumps({"step": 10 * k, "samples": 500 * k, "train_s": t, "test_loss": 1.0,
                        "test_accuracy": 0.9 if t >= crossing_s else 0.5}) + "\n"
            for k, t in enumerate(times)))


def one_node_baseline(sweep, name: str = "baseline_4x1", block: int = 0, **config):
    """The equal-resource baseline as the sweep submits it under SLURM: one process on one node (folder node0)."""
    launch = {"nnodes": 1, "node_rank": 0, "master_addr": "10.0.0.9"}
    write_report_run(sweep / f"block{block}" / name / "node0", "single", 4, 100.0, 20.0, block=block,
                     config={"launch": launch, **config})


def test_a_job_over_two_nodes_is_one_run_with_every_worker(tmp_path):
    """Node 0's workers train 40 s and reach the target at 10 s, node 1's train 50 s and reach it at 25 s: the run
    trained 8000 samples over its longest worker's 50 s (160 samples/s, where either node's summary says 100 or
    80), reached the target when its worst worker did (25 s), and is compared with the one-node baseline."""
    sweep = write_sweep(tmp_path / "sweep", {})
    job = sweep / "block0" / "strategy=allreduce"
    write_node(job, 0, [0, 1], train_s=40.0, crossing_s=10.0, sent_per_sample=1000.0)
    write_node(job, 1, [2, 3], train_s=50.0, crossing_s=25.0, sent_per_sample=3000.0, master_addr="10.0.0.2")
    one_node_baseline(sweep)
    one_node_baseline(sweep, "baseline_4x1_control", arm="control")
    out = tmp_path / "out"
    markdown = report_of(sweep, out=out)
    rows = {r["configuration"]: r for r in rows_of(out)}
    assert sorted(rows) == ["allreduce on 2 nodes", "single", "single (control)"]
    run = rows["allreduce on 2 nodes"]
    assert (run["run_dir"], run["hosts"], run["status"]) == (str(job), "host0 host1", "completed")
    assert float(run["total_samples"]) == 8000 and float(run["throughput_samples_per_s"]) == 160.0
    assert float(run["speedup_vs_single"]) == pytest.approx(1.6)
    assert float(run["time_to_target_s"]) == 25.0
    assert float(run["samples_to_target"]) == 4 * 50 * 20  # every worker's samples at the worst one's step 20
    assert float(run["bytes_sent_per_sample"]) == 2000.0
    assert "launch.node_rank" not in markdown
    verdict = verdict_of(markdown)
    assert "- allreduce on 2 nodes: reached test_accuracy ≥ 0.9 in 1 of 1 blocks; against single: " in verdict
    assert "one process with peers x peer_cpus CPUs on one node" in markdown.split("## Methods")[1]


def test_a_job_over_two_nodes_is_measured_in_every_workers_window(tmp_path):
    """Node 0's workers trained 1000 samples in their window in 10 s, node 1's in 16 s (20 and 30 steps): the run's
    throughput is 4000 samples over the longest 16 s, and bytes per sample weigh each node by its window's samples."""
    sweep = write_sweep(tmp_path / "sweep", {})
    job = sweep / "block0" / "strategy=allreduce"
    write_node(job, 0, [0, 1], train_s=40.0, crossing_s=10.0, sent_per_sample=1000.0,
               window={"samples": 1000, "train_s": 10.0, "steps": 20})
    write_node(job, 1, [2, 3], train_s=50.0, crossing_s=25.0, sent_per_sample=4000.0, master_addr="10.0.0.2",
               window={"samples": 3000, "train_s": 16.0, "steps": 30})
    one_node_baseline(sweep)
    out = tmp_path / "out"
    report_of(sweep, out=out)
    run = {r["configuration"]: r for r in rows_of(out)}["allreduce on 2 nodes"]
    assert float(run["throughput_samples_per_s"]) == pytest.approx(8000 / 16.0)
    assert float(run["bytes_sent_per_sample"]) == pytest.approx((2000 * 1000 + 6000 * 4000) / 8000)


def test_a_failed_or_silent_node_fails_its_run_once(tmp_path):
    """Node 1's peer 3 was killed, then node 0 failed on the lost connection: one failed run, with node 1's error
    first and node 0's kept. A job whose node 1 wrote no summary (started, then lost) is one failed run too."""
    sweep = write_sweep(tmp_path / "sweep", {})
    killed = sweep / "block0" / "fault.kill_peer=3"
    write_node(killed, 0, [0, 1], 40.0, 10.0, "failed", "node node0 (node rank 0 of 2): peer rank 0 lost node1")
    write_node(killed, 1, [2, 3], 5.0, 10.0, "failed", "node node1 (node rank 1 of 2): peer rank 3 was killed",
               fault={"kill_peer": 3})
    lost = sweep / "block0" / "fault.kill_peer=null"
    write_node(lost, 0, [0, 1], 40.0, 10.0, fault={"kill_peer": None})
    (lost / "node1" / ".avgbench").mkdir(parents=True)
    (lost / "node1" / ".avgbench" / "config.yaml").write_text("{}\n")  # started, never summarised
    out = tmp_path / "out"
    markdown = report_of(sweep, out=out)
    rows = sorted((r["run_dir"], r["status"], r["error"]) for r in rows_of(out))
    assert rows == [(str(killed), "failed", "node node1 (node rank 1 of 2): peer rank 3 was killed"),
                    (str(lost), "failed", "node rank 1 wrote no summary.json (its launcher was stopped or its node "
                                          "lost: see the job's SLURM logs)")]
    errors = markdown.split("## Errors")[1]
    assert "peer rank 0 lost node1" in errors and errors.count("peer rank 3 was killed") == 1
    assert "failed (seed 0): wrote no summary.json" not in markdown  # node 1 is the run's, not a run of its own


def test_recorded_noise_holds_the_primary_figures_and_the_samples_to_targets_spread(tmp_path):
    """primary_noise: the sd of the paired time-to-target log ratios, the blocks that detect x/÷1.10 after Holm,
    and the sd of the paired samples-to-target ratios (samples = time x throughput in these runs)."""
    from scipy.stats import t

    from metrics.report.noise import measured_rows

    samples_ratios = [1.0, 1.1, 0.95]
    throughputs = [120.0, 130.0, 110.0]
    times = [b * 100.0 * r / thr for b, r, thr in zip(BASELINE_TIMES, samples_ratios, throughputs)]
    sweep = write_sweep(tmp_path / "sweep", {"strategy=allreduce": blocks("allreduce", 2, throughputs, times),
                                             **baselines()})
    [row] = measured_rows([sweep])
    time_sd = statistics.stdev(math.log(a / b) for a, b in zip(times, BASELINE_TIMES))
    assert row["log_sd"] == pytest.approx(time_sd)
    assert row["samples_log_sd"] == pytest.approx(statistics.stdev(math.log(r) for r in samples_ratios))
    n = row["blocks_for_10pct"]

    def detects(blocks):  # the paired t-test's power calculation, written out, Holm's first step over 1 comparison
        return math.exp((t.ppf(1 - 0.05 / 2, blocks - 1) + t.ppf(0.8, blocks - 1)) * time_sd / blocks ** 0.5)
    assert detects(n) <= 1.10 < detects(n - 1)


def test_recorded_noise_counts_a_seed_once_across_sweeps(tmp_path):
    """Two sweeps with the same seeds converge alike (common random numbers): their blocks are one observation
    per seed, so pooling them gives the sd over the distinct seeds, not over every block."""
    from metrics.report.noise import measured_rows

    times = [12.0, 10.0, 11.5]
    jobs = {"strategy=allreduce": blocks("allreduce", 2, [100.0] * 3, times), **baselines()}
    first, second = write_sweep(tmp_path / "first", jobs), write_sweep(tmp_path / "second", jobs)
    [row] = measured_rows([first, second])
    over_seeds = statistics.stdev(math.log(a / b) for a, b in zip(times, BASELINE_TIMES))
    assert (row["blocks"], row["seeds"]) == (6, 3)
    assert row["log_sd"] == pytest.approx(over_seeds)
    assert row["samples_log_sd"] == pytest.approx(over_seeds)  # equal throughputs: samples scale as time


def test_noise_over_seeds_keeps_the_timing_spread_within_a_seed():
    """Blocks of one seed that differ in time: one block's variance is the seed means' plus the within-seed part
    that averaging removed (here, 2 blocks per seed: half of the within-seed variance)."""
    from metrics.report.noise import seed_log_sd

    logs = {("a", 0): 0.1, ("b", 0): 0.3, ("a", 1): -0.2, ("b", 1): 0.0, ("a", 2): 0.0, ("b", 2): 0.4}
    means = [0.2, -0.1, 0.2]
    within = ((0.1 ** 2 * 2) + (0.1 ** 2 * 2) + (0.2 ** 2 * 2)) / 3
    sd, seeds = seed_log_sd(logs, {block: block[1] for block in logs})
    assert seeds == 3
    assert sd == pytest.approx(math.sqrt(statistics.variance(means) + within / 2))


def test_recorded_noise_leaves_out_the_blocks_the_comparison_left_out(tmp_path):
    """An unfaithful run's block is out of the verdict's comparison, so it is out of the recorded noise too."""
    from metrics.report.noise import measured_rows

    times = [12.0, 10.0, 11.5]
    faithful = {"strategy=allreduce": blocks("allreduce", 2, [100.0] * 3, times), **baselines()}
    unfaithful = dict(faithful, **{"strategy=allreduce": faithful["strategy=allreduce"][:2] + [
        ("allreduce", 2, 1, 100.0, 40.0, {"summary": {"link": {"faithful": False, "reason": "carried 50 %"}}})]})
    [row] = measured_rows([write_sweep(tmp_path / "first", faithful), write_sweep(tmp_path / "second", unfaithful)])
    over_seeds = statistics.stdev(math.log(a / b) for a, b in zip(times, BASELINE_TIMES))
    assert (row["blocks"], row["seeds"]) == (5, 3)
    assert row["log_sd"] == pytest.approx(over_seeds)
    assert row["samples_log_sd"] == pytest.approx(over_seeds)


def test_a_configuration_that_never_reached_the_target_is_recorded_as_such_and_never_planned_from(tmp_path):
    """hivemind missed the target in all 3 blocks: it has no noise to record, and the record says so (a row with no
    log-sd, its blocks censored) instead of staying silent; repeats=auto then refuses it for that reason, not
    by asking for the sweep that was just run."""
    from bench.primary_noise import record
    from bench.results import load
    from metrics.recording.evidence import refresh_evidence
    from metrics.report.noise import planning_noise
    from metrics.report.primary import declare

    times = [12.0, 10.0, 11.5]
    sweep = write_sweep(tmp_path / "sweep", {"strategy=allreduce": blocks("allreduce", 2, [100.0] * 3, times),
                                             "strategy=hivemind": blocks("hivemind", 2, [100.0] * 3, [None] * 3),
                                             **baselines()})
    lines = record([sweep], tmp_path / "results")
    entry = load("primary_noise", tmp_path / "results")
    rows = {r["strategy"]: r for r in entry.body["rows"]}
    assert rows["allreduce"]["log_sd"] == pytest.approx(
        statistics.stdev(math.log(a / b) for a, b in zip(times, BASELINE_TIMES)))
    missed = rows["hivemind"]
    assert (missed["log_sd"], missed["blocks"], missed["censored"], missed["blocks_for_10pct"]) == (None, 0, 3, None)
    recorded = tmp_path / "results" / "primary_noise.json"
    assert any(line.startswith(f"recorded in {recorded} (primary_noise): hivemind time_to_target: no noise, it "
                               "reached the target in 0 of the 3 blocks compared") for line in lines)
    results = tmp_path / "evidence.json"
    refresh_evidence([entry.json()], results)
    primary = declare(report_config("hivemind", 2))
    assert planning_noise(results, primary, "digits", "tiny", ["allreduce"])[0] == rows["allreduce"]["log_sd"]
    with pytest.raises(ValueError, match=r"hivemind reached test_accuracy ≥ 0.9 in 0 of the 3 blocks compared .*: "
                                         r"no noise to plan from.*a target it reaches"):
        planning_noise(results, primary, "digits", "tiny", ["allreduce", "hivemind"])


# --- one estimator per claim: the claim, its ratio and its interval agree ------------------------------------------

def comparison_rows(markdown: str) -> list[list[str]]:
    """The declared comparisons' rows: configuration, against, ratio [interval], test, p, Holm-adjusted p, claim."""
    table = markdown.split("### Comparisons (declared before the data)")[1].split("\n### ")[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()
            if line.startswith("| ")][1:]
    return [r for r in rows if not r[0].startswith("---")]


def test_a_claim_never_points_away_from_its_printed_ratio(tmp_path):
    """Allreduce is faster in 11 of 12 blocks and misses the target in the last, far behind the baseline (ratio at most
    11.1 / 30): the censored block widens the model's sd, so no 'faster', and never a ratio below 1 beside
    'faster'."""
    ratios = [1.30, 1.10, 1.45, 1.25, 1.20, 1.38, 1.15, 1.33, 1.28, 1.22, 1.40, None]
    times = [10.0 + 0.1 * k for k in range(12)]
    allreduce = [t / r if r else None for t, r in zip(times, ratios)]
    sweep = write_sweep(tmp_path / "sweep", {
        "strategy=allreduce": blocks("allreduce", 2, [100.0] * 12, allreduce),
        **baselines(times)})
    markdown = report_of(sweep, out=tmp_path / "out")
    finding = line_of(verdict_of(markdown), "allreduce 2×1cpu")
    # the miss censored at its horizon (30 s = 3/4 of 4000 / 100 samples/s)
    assert finding == ("- allreduce 2×1cpu: reached test_accuracy ≥ 0.9 in 11 of 12 blocks; against single 2×1cpu: "
                       f"cannot tell: {interval_text(Ratio(ratios[:11], [(0.0, 11.1 / 30.0)]))}")
    for row in comparison_rows(markdown):
        low, high = map(float, re.search(r"\[([\d.]+), ([\d.]+)\]", row[2]).groups())
        assert (row[6] != "faster" or low > 1) and (row[6] != "slower" or high < 1), row


def test_a_miss_never_shields_a_configuration_from_slower(tmp_path):
    """Stepwise takes twice the baseline's time in every block: 'slower'. With its third block a miss instead (its
    horizon, 20 s: 3/4 of 4000 / 150 samples/s) it is still 'slower', on all three blocks."""
    slow = write_sweep(tmp_path / "slow", {"strategy=stepwise": blocks("stepwise", 2, [100.0] * 3, [20.0, 22.4, 21.0]),
                                           **baselines()})
    missed = write_sweep(tmp_path / "missed", {
        "strategy=stepwise": blocks("stepwise", 2, [100.0, 100.0, 150.0], [20.0, 22.4, None]), **baselines()})
    assert "against single 2×1cpu: slower: 0.50× [" in line_of(verdict_of(report_of(slow, out=tmp_path / "a")),
                                                                 "stepwise 2×1cpu")
    expected = interval_text(Ratio([10.0 / 20.0, 11.0 / 22.4], [(0.0, 10.5 / 20.0)]))
    assert line_of(verdict_of(report_of(missed, out=tmp_path / "b")), "stepwise 2×1cpu").endswith(
        f"against single 2×1cpu: slower: {expected}")
    assert expected.endswith("3 blocks, 1 censored)")


def test_a_run_that_crashed_before_its_first_evaluation_bounds_nothing_and_is_counted_left_out(tmp_path):
    """Allreduce crashed in block 2 before its first evaluation (it covered nothing): the block bounds the ratio on
    neither side, is left out and counted beside the ratio; the crash is a failed run in its caveats."""
    sweep = write_sweep(tmp_path / "sweep", {
        "strategy=allreduce": blocks("allreduce", 2, [100.0] * 3, [t / r for t, r in zip(BASELINE_TIMES,
                                                                                            (1.50, 1.53, 1.0))]),
        **baselines()})
    crashed = sweep / "block2" / "strategy=allreduce"
    summary = json.loads((crashed / "summary.json").read_text())
    (crashed / "summary.json").write_text(json.dumps(summary | {"status": "failed", "time_to_target_s": None}))
    (crashed / "peer0" / "eval.jsonl").write_text("")
    markdown = report_of(sweep, out=tmp_path / "out")
    expected = interval_text(Ratio([1.50, 1.53], dropped=1))
    assert line_of(verdict_of(markdown), "allreduce 2×1cpu").endswith(f"against single 2×1cpu: faster: {expected}")
    assert expected.endswith("2 blocks; 1 left out: no bound (both missed, or a run covered nothing))")
    assert "- block 2, allreduce 2×1cpu: failed" in caveats_of(markdown)


def test_on_throughput_a_failed_block_is_the_worst_outcome(tmp_path):
    """Throughput is the primary figure. Allreduce has 1.5x the baseline's throughput in 3 blocks and fails in the
    fourth; ring has 1.2x in all four. Allreduce ranks after ring, and is not called faster."""
    primary = {"config": {"report": {"baseline_strategy": "single", "primary": "throughput"}}}
    failed = {"status": "failed", **primary}
    base = [100.0, 102.0, 98.0, 101.0]
    sweep = write_sweep(tmp_path / "sweep", {
        "strategy=allreduce": [*blocks("allreduce", 2, [150.0, 155.0, 146.0], [None] * 3, **primary),
                               ("allreduce", 2, 1, 160.0, None, failed)],
        "strategy=ring": blocks("ring", 2, [b * r for b, r in zip(base, (1.2, 1.22, 1.18, 1.21))], [None] * 4,
                                **primary),
        "baseline_2x1": blocks("single", 2, base, [None] * 4, **primary),
        "baseline_1x1": blocks("single", 1, [60.0] * 4, [None] * 4, **primary)})
    verdict = verdict_of(report_of(sweep, out=tmp_path / "out"))
    ranked = re.findall(r"^\d+\. \*\*(.+?)\*\*", verdict, re.M)
    assert ranked.index("ring 2×1cpu") < ranked.index("allreduce 2×1cpu")
    assert "allreduce 2×1cpu is faster" not in answer_of(verdict)
    # the failed block at best a tie: 160 samples/s recorded, the ratio at most 1
    expected = Ratio([150.0 / 100.0, 155.0 / 102.0, 146.0 / 98.0], [(0.0, 1.0)])
    assert line_of(verdict, "allreduce 2×1cpu").endswith(f"against single 2×1cpu: cannot tell: "
                                                         f"{interval_text(expected)}")
    assert interval_text(expected).endswith("4 blocks, 1 censored)")


def test_null_comparisons_are_called_equivalent_within_the_smallest_effect_after_holm(tmp_path):
    """Two configurations no faster than the baseline, 6 blocks, realistic noise (log-sd 0.12): equivalent within
    report.smallest_effect (1.25), the TOST in Holm's family of 3."""
    noise = [0.12, -0.10, 0.05, -0.14, 0.08, -0.01]
    times = [10.0 + 0.2 * k for k in range(6)]
    sweep = write_sweep(tmp_path / "sweep", {
        "strategy=ring": blocks("ring", 2, [100.0] * 6, [t * math.exp(e) for t, e in zip(times, noise)]),
        "strategy=ps": blocks("ps", 2, [100.0] * 6, [t * math.exp(-e / 2) for t, e in zip(times, noise[::-1])]),
        **baselines(times)})
    markdown = report_of(sweep, out=tmp_path / "out")
    assert "against single 2×1cpu: no faster (equivalent within ×/÷1.25, TOST; 90 % interval [" in \
        line_of(verdict_of(markdown), "ring 2×1cpu")
    from scipy.stats import t
    logs = [-e for e in noise]
    centre, se = statistics.fmean(logs), statistics.stdev(logs) / math.sqrt(6)
    tost = max(t.sf((centre + math.log(1.25)) / se, 5), t.sf((math.log(1.25) - centre) / se, 5))
    row = next(r for r in comparison_rows(markdown) if r[:2] == ["ring 2×1cpu", "single 2×1cpu"])
    assert row[3] == "TOST (equivalent)" and float(row[4]) == pytest.approx(tost, abs=0.006)
    assert float(row[5]) >= float(row[4])  # Holm-adjusted


def test_holm_takes_an_equivalence_below_alpha_to_cannot_tell(tmp_path):
    """Three blocks of log-sd 0.09 around a ratio of 1: the TOST alone gives p = 0.025 (t = ln 1.25 / (0.09 /
    sqrt 3) = 4.29 on 2 df), equivalent against one comparison; the plan declares 3 comparisons, and after Holm's
    correction (p x 3 = 0.075) there is no claim."""
    noise = [0.09, -0.09, 0.0]
    jobs = {"strategy=ring": blocks("ring", 2, [100.0] * 3, [t * math.exp(e) for t, e in zip(BASELINE_TIMES, noise)]),
            **baselines()}
    alone = report_of(write_sweep(tmp_path / "alone", jobs), out=tmp_path / "a")
    assert re.search(r"against single 2×1cpu: no faster \(equivalent within ×/÷1\.25, TOST; 90 % interval \[.*\]\): "
                     r"1\.00× \[", line_of(verdict_of(alone), "ring 2×1cpu"))
    declared = {"declaration": {"comparisons": {"data=digits, model=tiny": [1, 2, 3]}}}
    markdown = report_of(write_sweep(tmp_path / "declared", jobs, plan=declared), out=tmp_path / "b")
    assert line_of(verdict_of(markdown), "ring 2×1cpu").endswith(
        "(×/÷1.25, 3 blocks) (TOST p = 0.025 before Holm's correction for 3 comparisons, 0.08 after)")


def test_blocks_where_both_missed_say_nothing_and_claim_nothing(tmp_path):
    """Stepwise and the baseline both missed in every block: no ratio. Stepwise reaching it once, the baseline never:
    the baseline's miss bounds that block's ratio from below, the both-missed blocks are left out, and one censored
    block with no pooled noise has no interval: a bound, no result."""
    never = write_sweep(tmp_path / "never", {"strategy=stepwise": blocks("stepwise", 2, [100.0] * 3, [None] * 3),
                                             **baselines([None] * 3)})
    assert line_of(verdict_of(report_of(never, out=tmp_path / "a")), "stepwise 2×1cpu").endswith(
        "against single 2×1cpu: no block tells them apart (both missed, or both crossed at the first evaluation, in "
        "every block): no ratio")
    once = write_sweep(tmp_path / "once", {"strategy=stepwise": blocks("stepwise", 2, [100.0] * 3, [12.0, None, None]),
                                           **baselines([None] * 3)})
    # block 0: the baseline's horizon, 30 s (3/4 of 4000 / 100 samples/s), against 12 s; blocks 1 and 2: left out
    finding = line_of(verdict_of(report_of(once, out=tmp_path / "b")), "stepwise 2×1cpu")
    assert finding.endswith("against single 2×1cpu: ≥ 2.50× (1 block: no interval): no result")


def test_a_run_measured_over_less_than_its_window_is_marked(tmp_path):
    from metrics.report.runs import Run
    from metrics.report.verdict import short_window

    def run(block, complete):
        return Run(tmp_path, Summary.from_dict({"config": {"block": block},
                                                "window": {"first": 6, "last": 35, "complete": complete}}), [])

    assert [short_window(r) for r in [run(0, True), run(1, False), Run(tmp_path, Summary.from_dict({}), [])]] == [
        None, "ended before the end of the measurement window (steps 6-35): its per-step figures cover fewer steps",
        None]


def test_a_configuration_that_stopped_at_its_target_is_not_of_unequal_length(tmp_path):
    from metrics.report.runs import Group, Run
    from metrics.report.verdict import length_caveat

    def group(name, samples, stopped):
        return Group([Run(tmp_path, Summary.from_dict({"config": {"max_steps": 100}, "total_samples": samples,
                                                       "evaluation": {"mode": "in_training",
                                                                      "stopped_at_target": stopped}}), [])], name)

    longest, stopped, short = group("a", 3200, False), group("b", 1600, True), group("c", 1600, False)
    groups = [longest, stopped, short]
    assert length_caveat(stopped, groups) is None
    assert length_caveat(short, groups) == "1,600 samples trained, 3,200 in the longest configuration"


# --- equivalence in its own words, the plan's margin, a killed run, a retry ----------------------------------------

def interval_90(ratios: list[float]) -> tuple[float, float]:
    """The 90 % t-interval of three ratios, by hand (t(0.95, 2) = 2.919986): the one a TOST at 5 % matches."""
    logs = [math.log(r) for r in ratios]
    centre = sum(logs) / 3
    half = 2.919986 * math.sqrt(sum((x - centre) ** 2 for x in logs) / 2) / math.sqrt(3)
    return math.exp(centre - half), math.exp(centre + half)


def test_an_interval_that_excludes_one_is_never_called_equivalent(tmp_path):
    """Ring at 1.08/1.10/1.12x the baseline: its 95 % interval excludes 1 (paired t p = 0.012) and lies within
    ×/÷1.25. Alone, it is faster, within the margin of no practical interest; with 6 declared comparisons the t-test
    fails Holm's correction: cannot tell, never "no faster" or "equivalent"."""
    ratios = (1.08, 1.10, 1.12)
    jobs = {"strategy=ring": blocks("ring", 2, [100.0] * 3, [t / r for t, r in zip(BASELINE_TIMES, ratios)]),
            **baselines()}
    estimate, low, high = interval(list(ratios))
    measured = f"{estimate:.2f}× [{low:.2f}, {high:.2f}] (×/÷{math.sqrt(high / low):.2f}, 3 blocks)"
    alone = verdict_of(report_of(write_sweep(tmp_path / "alone", jobs), out=tmp_path / "a"))
    assert line_of(alone, "ring 2×1cpu").endswith(
        f"against single 2×1cpu: faster: {measured}, within the ×/÷1.25 of no practical interest")
    assert answer_of(alone).startswith("Answer: ring 2×1cpu is faster than one process on the same 2 CPUs in "
                                       f"time-to-target to test_accuracy ≥ 0.9: {measured}")
    six = {"declaration": {"comparisons": {"data=digits, model=tiny": [1, 2, 3, 4, 5, 6]}}}
    markdown = report_of(write_sweep(tmp_path / "six", jobs, plan=six), out=tmp_path / "b")
    assert line_of(verdict_of(markdown), "ring 2×1cpu").startswith(
        f"- ring 2×1cpu: reached test_accuracy ≥ 0.9 in 3 of 3 blocks; against single 2×1cpu: cannot tell: {measured} "
        "(paired t-test p = 0.012 before Holm's correction for 6 comparisons")
    assert "no faster" not in markdown.split("## Methods")[0]
    assert [row[6] for row in comparison_rows(markdown)] == ["cannot tell"]


def test_equivalence_shows_its_90_percent_interval_and_takes_its_margin_from_the_plan(tmp_path):
    """Ratios 0.99/1.01/1.00, the runs' config silent on report.smallest_effect (1.25 by default), the plan declaring
    ×/÷1.05: equivalent within the plan's ×/÷1.05 (TOST p = 0.007), beside the 90 % interval that test matches."""
    ratios = [0.99, 1.01, 1.0]
    jobs = {"strategy=ps": blocks("ps", 2, [100.0] * 3, [t / r for t, r in zip(BASELINE_TIMES, ratios)]),
            **baselines()}
    sweep = write_sweep(tmp_path / "sweep", jobs, plan={"declaration": {"smallest_effect": 1.05}})
    estimate, low, high = interval(ratios)
    low_90, high_90 = interval_90(ratios)
    assert line_of(verdict_of(report_of(sweep, out=tmp_path / "out")), "ps 2×1cpu").endswith(
        f"against single 2×1cpu: no faster (equivalent within ×/÷1.05, TOST; 90 % interval [{low_90:.2f}, "
        f"{high_90:.2f}]): {estimate:.2f}× [{low:.2f}, {high:.2f}] (×/÷{math.sqrt(high / low):.2f}, 3 blocks)")


def test_a_killed_run_without_a_summary_counts_as_failed_in_its_block(tmp_path):
    """Ring is 1.50x and 1.53x the baseline in blocks 0 and 2 and was killed in block 1 (its launcher stopped: config and
    logs, no summary.json). The block counts, at the run's horizon (30 s: its evaluation before the last, 3/4 of
    4000 samples / 100 samples/s) against the baseline's 11 s, and the kill cannot help ring to a claim."""
    sweep = write_sweep(tmp_path / "sweep", {
        "strategy=ring": blocks("ring", 2, [100.0] * 3, [t / r for t, r in zip(BASELINE_TIMES, (1.50, 1.5, 1.53))]),
        **baselines()})
    killed = sweep / "block1" / "strategy=ring"
    config = json.loads((killed / "summary.json").read_text())["config"]
    (killed / "summary.json").unlink()
    (killed / ".avgbench").mkdir()
    (killed / ".avgbench" / "config.yaml").write_text(json.dumps(config))  # JSON is YAML
    markdown = report_of(sweep, out=tmp_path / "out")
    verdict = verdict_of(markdown)
    assert line_of(verdict, "ring 2×1cpu") == (
        "- ring 2×1cpu: reached test_accuracy ≥ 0.9 in 2 of 3 blocks; against single 2×1cpu: cannot tell: "
        + interval_text(Ratio([1.50, 1.53], [(0.0, 11.0 / 30.0)])))
    assert "- block 1, ring 2×1cpu: failed (seed 1): wrote no summary.json (its launcher was stopped" in \
        caveats_of(markdown)
    # without even its config, the planned run is missing from its sweep: no verdict
    shutil.rmtree(killed)
    assert answer_of(verdict_of(report_of(sweep, out=tmp_path / "gone"))).startswith(
        f"No verdict: {sweep}: 2 of its 3 declared blocks complete; no run in 1 planned job folder "
        "(block1/strategy=ring)")


# --- the answer first: the first screen, counted caveats, the terminal ------------------------------------------

def contended(runs: list[tuple], blocks_: list[int]) -> list[tuple]:
    """The runs with a peer starved of its CPU in these blocks, each with its own figure (a wall of text today)."""
    return [run[:5] + ({"summary": {"isolation": {"faithful": False, "unfaithful": [
        f"rank 1 received {50 + block} % of its promised CPU and waited 40 % of its time"]}}},)
        if block in blocks_ else run for block, run in enumerate(runs)]


def contended_sweep(tmp_path):
    times = BASELINE_TIMES + [10.2, 10.4, 10.1]
    ratios = [1.5, 1.45, 1.55, 1.52, 1.48, 1.5]
    runs = contended(blocks("allreduce", 2, [100.0] * 6, [t / r for t, r in zip(times, ratios)]), [0, 2, 5])
    return write_sweep(tmp_path / "sweep", {"strategy=allreduce": runs, **baselines(times)})


def test_the_first_screen_is_the_answer_the_comparisons_and_the_forest_plot(tmp_path):
    """report.md and report.html open with the answer, then the comparisons table, then one forest plot of every
    comparison, before any detail (the primary figure's declaration, the method, the entries) or caveat text."""
    out = tmp_path / "out"
    markdown = report_of(contended_sweep(tmp_path), out=out)
    page = (out / "report.html").read_text()
    first = [markdown.index("**Answer: allreduce 2×1cpu is faster"),
             markdown.index("| configuration | against | ratio [95 % interval] | claim |"),
             markdown.index("![Comparisons on one axis"), markdown.index("⚠"), markdown.index("Primary figure"),
             markdown.index("### Caveats")]
    assert first == sorted(first) and "promised CPU" not in markdown[:first[-1]]
    first = [page.index("<p class='answer'><b>Answer:"), page.index("<th>ratio [95 % interval]</th>"),
             page.index("<figure class='forest'>"), page.index("⚠"), page.index("Primary figure"),
             page.index("<h3>Caveats</h3>"), page.index("<figure>")]  # the per-configuration plots: below
    assert first == sorted(first) and "promised CPU" not in page[:first[-2]]


def test_many_unfaithful_runs_are_one_counted_line_linked_to_their_detail(tmp_path):
    markdown = report_of(contended_sweep(tmp_path), out=tmp_path / "out")
    verdict = verdict_of(markdown)
    # the section's caveats and the configuration's entry: one line each
    assert verdict.count("[⚠ 3 runs on a contended CPU left out](#s1-caveat-on-a-contended-cpu-left-out)") == 2
    assert "promised CPU" not in verdict
    assert "<a id='s1-caveat-on-a-contended-cpu-left-out'></a>**3 runs on a contended CPU left out**" in markdown
    assert caveats_of(markdown).count("of its promised CPU and waited 40 % of its time") == 3
    row = next(r for r in comparison_rows(markdown) if r[:2] == ["allreduce 2×1cpu", "single 2×1cpu"])
    assert row[7] == "3 runs (block 0, 2, 5)"


def test_the_end_of_a_sweep_prints_the_answer_and_the_comparisons(tmp_path, capsys):
    from omegaconf import OmegaConf

    from launchers.sweep import SweepReport

    sweep = contended_sweep(tmp_path)
    SweepReport().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}}))
    printed = capsys.readouterr().out
    answer = answer_of(verdict_of((sweep / "report.md").read_text()))
    header = re.search(r"^configuration +against +ratio \[95 % interval\] +claim$", printed, re.M)
    assert printed.index(answer) < header.start() < printed.index("caveat: 3 runs on a contended CPU left out") < \
        printed.index(f"comparison report: {sweep / 'report.html'}")
    assert re.search(r"^allreduce 2×1cpu +single 2×1cpu +\d\.\d\d× \[", printed, re.M)


def test_a_difference_is_not_claimed_on_the_equivalences_near_zero_p_values(tmp_path):
    """Ring 3-10 % faster than the baseline in 4 blocks (paired t p = 0.0339, scipy's ttest_1samp), ps within 1 % of
    it (both of ps's comparisons equivalent, TOST p < 0.002): every comparison's t-test stays in Holm's family, so
    ring's p is multiplied by the 3 comparisons left after the equivalences, 0.10, and there is no claim (with the
    equivalences' tests alone before it, it was multiplied by 1)."""
    base, ring_logs = [10.0, 11.0, 10.5, 10.2], [0.06, 0.03, 0.10, 0.04]
    jobs = {"strategy=ring": blocks("ring", 2, [100.0] * 4, [t * math.exp(-d) for t, d in zip(base, ring_logs)]),
            "strategy=ps": blocks("ps", 2, [100.0] * 4, [t * math.exp(e) for t, e in
                                                         zip(base, [0.01, -0.01, 0.005, -0.005])]),
            **baselines(base)}
    p = float(ttest_1samp(ring_logs, 0).pvalue)
    line = line_of(verdict_of(report_of(write_sweep(tmp_path / "sweep", jobs), out=tmp_path / "out")), "ring 2×1cpu")
    assert line.endswith(f"(paired t-test p = {p:.3f} before Holm's correction for 3 comparisons, {3 * p:.2f} after)")
    assert "cannot tell" in line


# --- the censored model: misses as evidence, the control arm in Holm's family, pooled noise ---------------------

def test_one_miss_of_the_faster_side_is_evidence_not_a_veto(tmp_path):
    """Ring is twice as fast as the baseline in 5 of 6 blocks and misses in the sixth, its horizon (5 s: 3/4 of
    4000 / 600 samples/s) bounding that block's ratio at 10.1 / 5 = 2.02: still 'faster' (the veto said cannot tell)."""
    times = BASELINE_TIMES + [10.2, 10.4, 10.1]
    ratios = [2.0, 2.1, 1.95, 2.05, 1.9]
    ring = blocks("ring", 2, [100.0] * 5 + [600.0], [t / r for t, r in zip(times, ratios)] + [None])
    sweep = write_sweep(tmp_path / "sweep", {"strategy=ring": ring, **baselines(times)})
    verdict = verdict_of(report_of(sweep, out=tmp_path / "out"))
    assert answer_of(verdict).startswith("Answer: ring 2×1cpu is faster than one process on the same 2 CPUs")
    assert "against single 2×1cpu: faster: " in line_of(verdict, "ring 2×1cpu")
    assert "(×/÷" in line_of(verdict, "ring 2×1cpu") and "6 blocks, 1 censored)" in line_of(verdict, "ring 2×1cpu")


def test_a_control_arm_excluding_one_before_holm_only_withholds_nothing(tmp_path):
    """The control arm's ratios (log 0.05 ± 0.015) give p = 0.029: its interval excludes 1, but in Holm's family
    beside allreduce's two tests its adjusted p is 0.058: the blocks stand, and allreduce's 1.5x is 'faster'."""
    control = {"config": {"arm": "control"}}
    sweep = write_sweep(tmp_path / "sweep", {
        "strategy=allreduce": blocks("allreduce", 2, [100.0] * 3, [t / r for t, r in zip(BASELINE_TIMES,
                                                                                            (1.50, 1.505, 1.495))]),
        "baseline_2x1_control": blocks("single", 2, [100.0] * 3, [t * math.exp(e) for t, e in zip(
            BASELINE_TIMES, (0.05, 0.065, 0.035))], **control), **baselines()})
    verdict = verdict_of(report_of(sweep, out=tmp_path / "out"))
    p = ttest_1samp([-0.05, -0.065, -0.035], 0.0).pvalue
    assert 0.025 < p < 0.05 / 2 + 0.01 and 2 * p > 0.05
    assert answer_of(verdict).startswith("Answer: allreduce 2×1cpu is faster than one process")
    assert f"excludes 1 before Holm's correction only (adjusted p {2 * p:.2f})" in verdict
    assert "withheld" not in line_of(verdict, "allreduce 2×1cpu")


def test_a_comparison_with_fewer_than_two_exact_blocks_borrows_the_pooled_noise(tmp_path):
    """Stepwise crosses in block 0 only (twice the baseline's time) and misses in blocks 1 and 2: one exact block. Its
    ratio takes the section's pooled sd (ring against the baseline, the only comparison with 2 exact blocks) on
    that comparison's 2 df, and is 'slower'."""
    from metrics.report.stats import Ratio
    ring = [1.50, 1.53, 1.47]
    sweep = write_sweep(tmp_path / "sweep", {
        "strategy=ring": blocks("ring", 2, [100.0] * 3, [t / r for t, r in zip(BASELINE_TIMES, ring)]),
        "strategy=stepwise": blocks("stepwise", 2, [100.0] * 3, [20.0, None, None]), **baselines()})
    finding = line_of(verdict_of(report_of(sweep, out=tmp_path / "out")), "stepwise 2×1cpu")
    expected = Ratio([10.0 / 20.0], [(0.0, 11.0 / 30.0), (0.0, 10.5 / 30.0)],
                     sd_floor=statistics.stdev(math.log(r) for r in ring), floor_df=2)
    low, high = expected.interval()
    assert finding.endswith(f"against single 2×1cpu: slower: {expected.estimate:.2f}× [{low:.2f}, {high:.2f}] "
                            f"(×/÷{math.sqrt(high / low):.2f}, 3 blocks, 2 censored)"), finding
