"""bench/pause_shift.py's within-run figure: the steps just after a pause against the window's other steps."""
import itertools

import pytest

from bench.pause_shift import after_pause_ratio


def logged(durations: dict[int, float]) -> list[dict]:
    """steps.jsonl's train_s (training time, pauses left out) after each step of these durations."""
    clock = itertools.accumulate(durations[step] for step in sorted(durations))
    return [{"step": step, "train_s": t} for step, t in zip(sorted(durations), clock)]


def test_the_steps_after_a_pause_against_the_others_in_the_window():
    # eval_every=10: steps 11, 21 and 31 follow a pause; they take 0.55 s, every other step 0.50 s; steps 1-5 (outside
    # the window 6-35) take 2 s and must not count
    durations = {step: 2.0 if step <= 5 else 0.55 if step % 10 == 1 else 0.50 for step in range(0, 36)}
    assert after_pause_ratio(logged(durations), 6, 35) == pytest.approx(1.1)
    steady = {step: 0.5 for step in range(0, 36)}
    assert after_pause_ratio(logged(steady), 6, 35) == pytest.approx(1.0)
