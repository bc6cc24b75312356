"""bench/comm_cpu.py's model of a step at a free wire, on runs drawn from known costs."""
import pytest

from bench.comm_cpu import MB, communication_cpu, means, predicted_step

pytestmark = pytest.mark.timeout(30)

PER_STEP_S, PER_MB_S, WAIT_S, WAIT_MB_S = 0.002, 0.0015, 0.0005, 0.0002  # the costs the rows are drawn from
FIT, HELD_OUT = [320, 1728, 3200], [864]


def compute_s(width: int) -> float:
    return 1e-9 * width ** 2


def mb(width: int) -> float:
    return 4 * width ** 2 / MB


def rows() -> list[dict]:
    """One process's rows and a strategy's: its CPU one process's plus PER_STEP_S and PER_MB_S a MB (sent and
    received), its step that CPU plus WAIT_S and WAIT_MB_S a MB."""
    found = []
    for width in FIT + HELD_OUT:
        found.append({"strategy": "single", "width": width, "cpu_s": compute_s(width), "step_s": compute_s(width),
                      "bytes": 0.0, "faithful": True})
        cpu = compute_s(width) + PER_STEP_S + PER_MB_S * mb(width)
        found.append({"strategy": "ring", "width": width, "cpu_s": cpu, "step_s": cpu + WAIT_S + WAIT_MB_S * mb(width),
                      "bytes": mb(width) * MB, "faithful": True})
    return found


def test_the_costs_a_run_was_drawn_from_are_found_and_predict_a_held_out_size():
    cost = communication_cpu(rows(), "ring", FIT)
    assert cost == pytest.approx({"cpu_s_per_step": PER_STEP_S, "cpu_s_per_mb": PER_MB_S, "wait_s_per_step": WAIT_S,
                                  "wait_s_per_mb": WAIT_MB_S})
    case = predicted_step(rows(), "ring", cost, 864)
    expected = compute_s(864) + PER_STEP_S + PER_MB_S * mb(864) + WAIT_S + WAIT_MB_S * mb(864)
    assert case["predicted_s"] == pytest.approx(expected) and case["error"] == pytest.approx(0, abs=1e-9)


def test_a_held_out_size_is_not_fitted():
    """A held-out row that breaks the costs shows as the prediction's error, not as a refit."""
    drawn = rows()
    held = next(r for r in drawn if r["strategy"] == "ring" and r["width"] == 864)
    held["step_s"] *= 1.25
    cost = communication_cpu(drawn, "ring", FIT)
    assert cost["cpu_s_per_mb"] == pytest.approx(PER_MB_S)
    assert predicted_step(drawn, "ring", cost, 864)["error"] == pytest.approx(1 / 1.25 - 1)


def test_repeats_are_averaged_and_one_unfaithful_repeat_marks_the_case():
    drawn = rows()
    again = [dict(r, cpu_s=r["cpu_s"] * 3, faithful=r["width"] != 864) for r in drawn]
    averaged = {(r["strategy"], r["width"]): r for r in means(drawn + again)}
    first = {(r["strategy"], r["width"]): r for r in drawn}
    assert averaged["ring", 320]["cpu_s"] == pytest.approx(2 * first["ring", 320]["cpu_s"])
    assert averaged["ring", 320]["faithful"] and not averaged["ring", 864]["faithful"]
