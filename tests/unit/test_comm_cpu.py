"""bench/comm_cpu.py's model of a step at a free wire, on runs drawn from known costs."""
import pytest

from bench import comm_cpu
from bench.comm_cpu import MB, communication_cost, interpolated, means, predicted_step, steps_for

pytestmark = pytest.mark.timeout(30)

FIT, HELD_OUT = [320, 1200, 2400, 3200], [864, 1728]
KNEE_MB = 20.0  # the drawn communication costs 1 ms a MB below the knee and 0.5 ms a MB above it


def compute_s(width: int) -> float:
    return 1e-9 * width ** 2


def mb(width: int) -> float:
    return 4 * width ** 2 / MB


def comm_s(megabytes: float) -> float:
    """A cost with a knee between the fit sizes 1200 (5.8 MB) and 2400 (23 MB): no single line through the fit
    sizes describes it, and it is straight between neighbouring fit sizes only where no knee lies between them."""
    return 0.002 + 0.001 * min(megabytes, KNEE_MB) + 0.0005 * max(0.0, megabytes - KNEE_MB)


def rows() -> list[dict]:
    """One process's rows and a strategy's: its step one process's step plus comm_s of its payload, its CPU that
    step less 1 ms of waiting."""
    found = []
    for width in FIT + HELD_OUT:
        found.append({"strategy": "single", "width": width, "cpu_s": compute_s(width), "step_s": compute_s(width),
                      "bytes": 0.0, "faithful": True})
        step = compute_s(width) + comm_s(mb(width))
        found.append({"strategy": "ring", "width": width, "cpu_s": step - 0.001, "step_s": step,
                      "bytes": mb(width) * MB, "faithful": True})
    return found


def test_a_held_out_size_between_straight_parts_is_predicted_from_the_fit_sizes_alone():
    cost = communication_cost(rows(), "ring", FIT)
    assert [p["step_s"] for p in cost["points"]] == pytest.approx([comm_s(mb(w)) for w in FIT])
    assert [p["cpu_s"] for p in cost["points"]] == pytest.approx([comm_s(mb(w)) - 0.001 for w in FIT])
    case = predicted_step(rows(), "ring", cost, 864)
    assert case["predicted_s"] == pytest.approx(compute_s(864) + comm_s(mb(864)))
    assert case["error"] == pytest.approx(0, abs=1e-9)


def test_a_knee_between_two_fit_sizes_shows_as_the_prediction_error():
    """1728 (11.9 MB) lies between 1200 and 2400 with the knee at 20 MB between them: the straight line between them
    underpredicts the cost there (the cost is concave), by the chord's depth below the knee's two lines."""
    case = predicted_step(rows(), "ring", communication_cost(rows(), "ring", FIT), 1728)
    low, high = mb(1200), mb(2400)
    chord = comm_s(low) + (comm_s(high) - comm_s(low)) * (mb(1728) - low) / (high - low)
    assert case["comm_s"] == pytest.approx(chord) and case["comm_s"] < comm_s(mb(1728))
    assert case["error"] == pytest.approx((compute_s(1728) + chord) / (compute_s(1728) + comm_s(mb(1728))) - 1)


def test_a_held_out_size_is_not_fitted():
    """A held-out row that breaks the costs shows as the prediction's error, not as a refit."""
    drawn = rows()
    held = next(r for r in drawn if r["strategy"] == "ring" and r["width"] == 864)
    held["step_s"] *= 1.25
    cost = communication_cost(drawn, "ring", FIT)
    assert [p["width"] for p in cost["points"]] == FIT
    assert predicted_step(drawn, "ring", cost, 864)["error"] == pytest.approx(1 / 1.25 - 1)


def test_the_cost_is_not_extrapolated_beyond_the_measured_sizes():
    with pytest.raises(ValueError, match="outside the measured"):
        interpolated({1e6: 1.0, 2e6: 2.0}, 2.5e6)
    assert interpolated({1e6: 1.0, 2e6: 3.0}, 1.25e6) == pytest.approx(1.5)
    assert interpolated({1e6: 1.0, 2e6: 3.0}, 1e6) == 1.0


def test_a_held_out_width_outside_the_fit_widths_is_refused_before_any_run(monkeypatch):
    def no_run(*args: object) -> dict:
        raise AssertionError("a run started")
    monkeypatch.setattr(comm_cpu, "measure", no_run)
    with pytest.raises(ValueError, match="outside the fit widths"):
        comm_cpu.run("fit_widths=320,1200 held_out_widths=864,2400")


def test_narrow_runs_take_more_steps_for_the_work_they_save_up_to_the_cap():
    assert steps_for(3200, 3200, 40, 1000) == 40
    assert steps_for(1600, 3200, 40, 1000) == 160  # a quarter of the work a step, four times the steps
    assert steps_for(320, 3200, 40, 1000) == 1000


def test_repeats_are_averaged_and_one_unfaithful_repeat_marks_the_case():
    drawn = rows()
    again = [dict(r, cpu_s=r["cpu_s"] * 3, faithful=r["width"] != 864) for r in drawn]
    averaged = {(r["strategy"], r["width"]): r for r in means(drawn + again)}
    first = {(r["strategy"], r["width"]): r for r in drawn}
    assert averaged["ring", 320]["cpu_s"] == pytest.approx(2 * first["ring", 320]["cpu_s"])
    assert averaged["ring", 320]["faithful"] and not averaged["ring", 864]["faithful"]
