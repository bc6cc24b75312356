"""The verdict's answer, its ranking, its statistics and its caveats, on summaries written here (unit tier: no run,
no process).

Expected intervals are computed here by hand for three blocks (df = 2, where Student's t has a closed form:
quantile(p) = (2p - 1) / sqrt(2 p (1 - p)), so t(0.975, 2) = 4.302653). The full report over real runs is
tests/test_report.py (integration tier).
"""
import math
from pathlib import Path

import pytest

from metrics.report_data import Run, attach_baselines, group_runs, label_groups, sections_of
from metrics.report_verdict import section_verdict

pytestmark = pytest.mark.timeout(30)

T_975_DF2 = 4.302653


def run(strategy: str, peers: int, throughput: float, time_to_target: float | None, cores: list[list[int]],
        peer_cpus: int = 1, block: int | None = None, **extra) -> Run:
    config = {"strategy": {"name": strategy}, "data": {"name": "digits"}, "model": {"name": "resnet18"},
              "peers": peers, "peer_cpus": peer_cpus, "batch_size": 32, "lr": 0.01, "max_steps": 100,
              "seed": 0 if block is None else block, "block": block,
              "target": {"metric": "test_accuracy", "value": 0.9}, "report": {"baseline_strategy": "single"}}
    summary = {"status": "completed", "config": config, "is_baseline": strategy == "single",
               "throughput_samples_per_s": throughput, "time_to_target_s": time_to_target,
               "target": config["target"], "total_samples": 12800, "bytes_sent_per_sample": 0 if strategy == "single"
               else 1000, "accuracy_by_worker": {"worst": 0.95}, "time_breakdown_share": {"compute_s": 1.0},
               "peers": [{"result": {"cores": c}} for c in cores], **extra}
    return Run(Path(f"/runs/{strategy}{peers}x{peer_cpus}/{block}"), summary, [])


def verdict(*runs: Run):
    groups = group_runs(list(runs))
    attach_baselines(groups)
    (section,) = sections_of(groups)
    label_groups(section.groups)
    return section_verdict(section)


def blocks(strategy: str, peers: int, throughputs: list[float], cores, **extra) -> list[Run]:
    """One run per block; time-to-target = 8000 samples / throughput (the same samples-to-target each block)."""
    return [run(strategy, peers, t, 8000 / t, cores, block=b, **extra) for b, t in enumerate(throughputs)]


def interval(ratios: list[float]) -> tuple[float, float, float]:
    """Geometric mean and 95 % t-interval of three ratios, by hand."""
    logs = [math.log(r) for r in ratios]
    centre = sum(logs) / 3
    sd = math.sqrt(sum((x - centre) ** 2 for x in logs) / 2)
    half = T_975_DF2 * sd / math.sqrt(3)
    return math.exp(centre), math.exp(centre - half), math.exp(centre + half)


FOUR_ON_TWO_CORES = [[0], [1], [0], [1]]
DRIFT = [50.0, 100.0, 150.0]  # the machine's speed drifts 3x between blocks: only paired ratios survive it


def test_one_block_gives_no_result_only_a_ratio_without_interval():
    result = verdict(run("ring", 4, 80.0, 81.0, FOUR_ON_TWO_CORES), run("ps", 4, 63.0, 102.0, FOUR_ON_TWO_CORES),
                     run("single", 4, 76.0, 84.0, [[0, 1]]), run("single", 1, 51.0, 31.0, [[0]]))
    assert result.answer.startswith(
        "Answer: ring 4×1cpu reaches test_accuracy ≥ 0.9 first among the averaging strategies (81 s, mean of 1); "
        "its time-to-target speedup over one process on the same 4 CPUs is 1.04× in one block: the interval cannot "
        "be computed (repeats=1), so this is no result.")
    assert "faster" not in result.answer and "One block per comparison: no interval can be computed" in result.noise
    # the 1-CPU process reached the target first, but on fewer CPUs: a reference, not a contender
    assert [e.label for e in result.entries] == ["ring 4×1cpu", "single 4×1cpu", "ps 4×1cpu"]
    assert [e.label for e in result.references] == ["single 1×1cpu"]
    assert "oversubscribed: 4 CPUs asked, 2 cores on this host, so processes shared cores" in result.entries[0].caveats
    assert "speedup 1.05× (1 block, no interval) vs single 4×1cpu" in ", ".join(result.entries[0].figures)


def test_paired_blocks_cancel_drift_and_a_clear_win_is_called_faster():
    ratios = [1.50, 1.53, 1.47]
    result = verdict(*blocks("stepwise", 2, [r * t for r, t in zip(ratios, DRIFT)], [[0], [1]]),
                     *blocks("single", 2, DRIFT, [[0, 1]]))
    estimate, low, high = interval(ratios)
    assert low > 1.3  # unpaired, the same runs span 50..225 samples/s on each side
    assert (f"; it is faster than one process on the same 2 CPUs: time-to-target speedup {estimate:.2f}× "
            f"[{low:.2f}, {high:.2f}] (3 blocks).") in result.answer
    assert f"speedup {estimate:.2f}× [{low:.2f}, {high:.2f}] (3 blocks) vs single" in ", ".join(
        result.entries[0].figures)


def test_noise_says_cannot_tell_with_the_interval_half_width():
    ratios = [1.30, 0.95, 1.10]
    result = verdict(*blocks("stepwise", 2, [r * t for r, t in zip(ratios, DRIFT)], [[0], [1]]),
                     *blocks("single", 2, DRIFT, [[0, 1]]))
    estimate, low, high = interval(ratios)
    noise = max(high / estimate - 1, 1 - low / estimate)
    assert (f"; cannot tell it from one process on the same 2 CPUs at this noise level (±{noise:.0%}): "
            f"time-to-target speedup {estimate:.2f}× [{low:.2f}, {high:.2f}] (3 blocks).") in result.answer
    sd = math.sqrt(sum((math.log(r / estimate)) ** 2 for r in ratios) / 2)
    detectable = math.exp((T_975_DF2 + 1.060660) * sd / math.sqrt(3)) - 1  # t(0.8, 2) = 1.060660
    assert result.noise == (f"Noise: 3 paired blocks; the paired ratios vary by {sd:.1%} (sd of their logs, pooled "
                            f"over the comparisons), so 3 blocks detect a difference of about ±{detectable:.0%} or more "
                            "(5 % two-sided, 80 % power).")


def test_no_faster_than_one_process_only_from_equivalence():
    result = verdict(*blocks("ps", 2, [1.01 * t for t in DRIFT], [[0], [1]]),
                     *blocks("single", 2, [t * f for t, f in zip(DRIFT, (1.0, 1.02, 1.0))], [[0, 1]]))
    assert "; it is no faster than one process on the same 2 CPUs (equivalent within ±5%, TOST)" in result.answer


def test_when_one_process_wins_the_answer_says_so():
    result = verdict(*blocks("ps", 2, [0.8 * t * f for t, f in zip(DRIFT, (1.0, 1.01, 0.99))], [[0], [1]]),
                     *blocks("single", 2, DRIFT, [[0, 1]]))
    assert "; it is slower than one process on the same 2 CPUs: " in result.answer
    assert result.answer.endswith(": here, no averaging strategy beats a single process with the same CPUs.")
    assert not any("oversubscribed" in c for e in result.entries for c in e.caveats)


def test_holm_correction_counts_the_comparisons_of_the_section():
    # logs a - d, a, a + d with a / d = 3.258: t = 3.258 x sqrt(3) = 5.643, p = 1 - t / sqrt(2 + t^2) = 0.030 alone
    d = 0.05
    ratios = [math.exp(3.258 * d + k * d) for k in (-1, 0, 1)]
    alone = verdict(*blocks("stepwise", 2, [r * t for r, t in zip(ratios, DRIFT)], [[0], [1]]),
                    *blocks("single", 2, DRIFT, [[0, 1]]))
    assert "; it is faster than one process on the same 2 CPUs" in alone.answer
    # with a second averaging configuration there are 3 comparisons: 0.030 x 3 > 0.05
    crowded = verdict(*blocks("stepwise", 2, [r * t for r, t in zip(ratios, DRIFT)], [[0], [1]]),
                      *blocks("ps", 2, [0.5 * t * f for t, f in zip(DRIFT, (1.0, 1.3, 0.8))], [[0], [1]]),
                      *blocks("single", 2, DRIFT, [[0, 1]]))
    assert "; cannot tell it from one process on the same 2 CPUs at this noise level" in crowded.answer
    assert "(it excludes 1 only before Holm's correction for 3 comparisons: adjusted p = 0.09)" in crowded.answer
    assert " It is faster than ps: " in crowded.answer or " Cannot tell it from ps " in crowded.answer


def test_the_answer_carries_the_setting_caveats():
    shape = {"peers": 4, "peer_cpus": 1, "processes": 4, "cpus_asked": 4, "cores": 2, "oversubscription": 2.0,
             "fits": False, "peers_default": True}
    machine = {"cores": 2, "alone": False, "other_cpu_share": 0.3, "load_mean": 2.5}
    isolation = {"status": "not isolated", "reason": "no cgroup", "dilation": 4, "faithful": False,
                 "unfaithful": ["rank 1 got 0.62 of 1 CPU"]}
    result = verdict(*blocks("ring", 4, DRIFT, FOUR_ON_TWO_CORES, shape=shape, machine=machine, isolation=isolation),
                     *blocks("single", 4, DRIFT, [[0, 1]]))
    assert result.answer.endswith("Caveats: oversubscribed (by 2×, on 2 cores); not isolated (no cgroup); "
                                  "unfaithful: rank 1 got 0.62 of 1 CPU; dilated by 4; not alone on the machine "
                                  "(other processes: up to 30% of its CPU).")
    assert "oversubscribed (by 2×, on 2 cores)" in result.entries[0].caveats


def test_without_a_baseline_the_answer_says_what_is_missing():
    result = verdict(run("stepwise", 2, 40.0, None, [[0], [1]]))
    assert "none reached test_accuracy ≥ 0.9 in every repeat" in result.answer
    assert "no run of one process on 2 CPUs to compare it with" in result.answer


def test_a_baseline_in_other_blocks_gives_no_paired_ratio():
    result = verdict(*blocks("stepwise", 2, DRIFT[:2], [[0], [1]]), run("single", 2, 60.0, 90.0, [[0, 1]], block=2))
    assert "; no run of one process on the same 2 CPUs in the same block: no paired ratio." in result.answer


def test_a_single_run_on_as_many_cpus_as_a_compared_configuration_is_ranked():
    crashed = run("single", 1, 30.0, None, [[0]])
    crashed.summary["status"] = "failed"
    crashed.config["fault"] = {"raise_peer": 0, "at_step": 3}  # another configuration of single on 1 CPU
    result = verdict(run("allreduce", 1, 50.0, 40.0, [[0]]), run("single", 1, 52.0, 38.0, [[0]]), crashed)
    assert len(result.entries) == 3 and not result.references
    assert any(c.startswith("failed (seed 0)") for e in result.entries for c in e.caveats)


def test_samples_to_target_and_time_per_sample_are_shown_with_their_interval_over_blocks():
    """Each over the configuration's blocks: geometric mean and 95 % t-interval on the logs, and the block count;
    a block that missed the target is counted as missing."""
    from metrics.report_tables import speed_table

    samples, per_sample = [8000.0, 8400.0, 7600.0], [0.010, 0.012, 0.011]
    stepwise = [run("stepwise", 2, 100.0, s * t, [[0], [1]], block=b, samples_to_target=s, time_per_sample_s=t)
                for b, (s, t) in enumerate(zip(samples, per_sample))]
    missed = run("single", 2, 90.0, None, [[0, 1]], block=2, samples_to_target=None, time_per_sample_s=None)
    single = [run("single", 2, 90.0, 8000 * 0.012, [[0, 1]], block=b, samples_to_target=8000.0,
                  time_per_sample_s=0.012) for b in (0, 1)] + [missed]
    groups = group_runs([*stepwise, *single])
    attach_baselines(groups)
    (section,) = sections_of(groups)
    label_groups(section.groups)
    table = speed_table(section.groups, synthetic=False)
    rows = {row[1]: dict(zip(table.columns, row)) for row in table.rows}
    estimate, low, high = interval(samples)
    assert rows["stepwise"]["samples-to-target"] == f"{estimate:.0f} [{low:.0f}, {high:.0f}] (3 blocks)"
    estimate, low, high = (1000 * v for v in interval(per_sample))
    assert rows["stepwise"]["time per sample (ms)"] == f"{estimate:.3g} [{low:.3g}, {high:.3g}] (3 blocks)"
    assert rows["single"]["samples-to-target"] == "8000 [8000, 8000] (2 of 3 blocks)"
