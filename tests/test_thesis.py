"""bench/thesis.py without running it: the families chosen and how a rerun of some is saved."""
import pytest

from bench.thesis import chosen, families, family_overrides, merge


def test_families_chosen_by_name():
    plan = families(2)
    assert list(chosen(plan, "")) == ["hivemind", "strategies"]
    assert chosen(plan, "hivemind") == {"hivemind": plan["hivemind"]}
    assert list(chosen(plan, " strategies,hivemind ")) == ["hivemind", "strategies"]  # the plan's order
    with pytest.raises(ValueError, match="unknown family batch"):  # the batch family is the full grid's only
        chosen(plan, "hivemind,batch")


def test_the_family_overrides_come_after_the_job():
    # Hydra keeps the last value of a key: the batch family's batch sizes must follow the job's batch_size=32
    command = family_overrides(families(16)["batch"])
    assert command.index("batch_size=32,64,128") > command.index("batch_size=32")


def test_a_rerun_of_some_families_keeps_the_others():
    kept = {"name": "thesis", "measured_at": "then", "ratio": 0.9,
            "families": {"hivemind": {"rows": [{"speedup": 0.5}]}, "strategies": {"rows": [{"speedup": 0.9}]}}}
    new = {"name": "thesis", "measured_at": "now", "ratio": 0.7, "families": {"hivemind": {"rows": [{"speedup": 0.7}]}}}
    merged = merge(kept, new)
    assert merged["families"] == {"hivemind": {"measured_at": "now", "rows": [{"speedup": 0.7}]},
                                  "strategies": {"measured_at": "then", "rows": [{"speedup": 0.9}]}}
    assert merged["ratio"] == 0.9
