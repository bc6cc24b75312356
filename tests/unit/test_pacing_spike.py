"""bench/pacing_spike.py's device plan: the truth a core each beside the emulations on 2 shared cores, or a refusal
that says what it needs."""
import pytest

from bench.pacing_spike import device_plan


def test_the_truth_gets_a_core_each_apart_from_the_two_shared_cores():
    plan = device_plan(set(range(16)), peers=8)
    (peers, mode, k, truth), *emulations = plan
    assert (peers, mode, k) == (8, "real", 1)
    assert [len(cores) for cores in truth] == [1] * 8 and len(set().union(*truth)) == 8
    for _, mode, _, cores in emulations:
        assert mode in ("twin", "padded") and len(cores) == 8
        assert all(c == {0, 1} for c in cores)
        assert not set().union(*cores) & set().union(*truth)


def test_too_few_cores_are_refused_in_one_line_naming_what_it_needs():
    with pytest.raises(SystemExit) as refused:
        device_plan({0, 1}, peers=8)
    message = str(refused.value)
    assert "need 10 cores" in message and "has 2" in message and "\n" not in message
