"""The verdict's answer, its ranking and its caveats, on summaries written here (unit tier: no run, no process).

The full report over real runs is tests/test_report.py (integration tier).
"""
from pathlib import Path

import pytest

from metrics.report_data import Group, Run, attach_baselines, label_groups, sections_of
from metrics.report_verdict import section_verdict

pytestmark = pytest.mark.timeout(30)


def run(strategy: str, peers: int, throughput: float, time_to_target: float | None, cores: list[list[int]],
        peer_cpus: int = 1) -> Run:
    config = {"strategy": {"name": strategy}, "data": {"name": "digits"}, "model": {"name": "resnet18"},
              "peers": peers, "peer_cpus": peer_cpus, "batch_size": 32, "lr": 0.01, "max_steps": 100, "seed": 0,
              "target": {"metric": "test_accuracy", "value": 0.9}, "report": {"baseline_strategy": "single"}}
    summary = {"status": "completed", "config": config, "is_baseline": strategy == "single",
               "throughput_samples_per_s": throughput, "time_to_target_s": time_to_target,
               "target": config["target"], "total_samples": 12800, "bytes_sent_per_sample": 0 if strategy == "single"
               else 1000, "accuracy_by_worker": {"worst": 0.95}, "time_breakdown_share": {"compute_s": 1.0},
               "peers": [{"result": {"cores": c}} for c in cores]}
    return Run(Path(f"/runs/{strategy}{peers}x{peer_cpus}"), summary, [])


def verdict(*runs: Run):
    groups = [Group([r]) for r in runs]
    attach_baselines(groups)
    (section,) = sections_of(groups)
    label_groups(section.groups)
    return section_verdict(section)


FOUR_ON_TWO_CORES = [[0], [1], [0], [1]]


def test_the_answer_names_the_best_strategy_against_one_process_on_the_same_cpus():
    result = verdict(run("ring", 4, 80.0, 81.0, FOUR_ON_TWO_CORES), run("ps", 4, 63.0, 102.0, FOUR_ON_TWO_CORES),
                     run("single", 4, 76.0, 84.0, [[0, 1]]), run("single", 1, 51.0, 31.0, [[0]]))
    assert result.answer == ("Answer: ring 4×1cpu reaches test_accuracy ≥ 0.9 first among the averaging strategies "
                             "(81 s), 1.05× one process on the same 4 CPUs.")
    # the 1-CPU process reached the target first, but on fewer CPUs: a reference, not a contender
    assert [e.label for e in result.entries] == ["ring 4×1cpu", "single 4×1cpu", "ps 4×1cpu"]
    assert [e.label for e in result.references] == ["single 1×1cpu"]
    assert "oversubscribed: 4 CPUs asked, 2 cores on this host, so processes shared cores" in result.entries[0].caveats


def test_when_one_process_wins_the_answer_says_so():
    result = verdict(run("ps", 2, 40.0, 120.0, [[0], [1]]), run("single", 2, 50.0, 90.0, [[0, 1]]))
    assert result.answer.endswith("0.8× one process on the same 2 CPUs: here, no averaging strategy beats a single "
                                  "process with the same CPUs.")
    assert not any("oversubscribed" in c for e in result.entries for c in e.caveats)


def test_without_a_baseline_the_answer_says_what_is_missing():
    result = verdict(run("stepwise", 2, 40.0, None, [[0], [1]]))
    assert "none reached test_accuracy ≥ 0.9 in every repeat" in result.answer
    assert "no run of one process on 2 CPUs to compare it with" in result.answer


def test_a_single_run_on_as_many_cpus_as_a_compared_configuration_is_ranked():
    crashed = run("single", 1, 30.0, None, [[0]])
    crashed.summary["status"] = "failed"
    crashed.config["fault"] = {"raise_peer": 0, "at_step": 3}  # another configuration of single on 1 CPU
    result = verdict(run("allreduce", 1, 50.0, 40.0, [[0]]), run("single", 1, 52.0, 38.0, [[0]]), crashed)
    assert len(result.entries) == 3 and not result.references
    assert any(c.startswith("failed (seed 0)") for e in result.entries for c in e.caveats)
