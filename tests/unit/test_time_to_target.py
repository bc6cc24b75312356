"""Time-to-target from hand-made evaluation logs and synthetic learning curves (unit tier).

confirmed_crossing: the crossing is interpolated between the last evaluation below the target and the first
at or above it, and must hold at the next evaluation. isotonic: the crossing of the curve's monotone fit.
Either splits into all workers' samples-to-target x time per sample, never extrapolates past the last
evaluation, and is checked against curves whose crossing is known; the test-set bootstrap against the
spread over fresh test sets."""
import json

import numpy as np
import pytest
import yaml

from helpers import ROOT

from metrics.recording.rundir import RunDir
from metrics.summary.build import build_summary as build
from metrics.summary.target import CAUSAL, crossing_step, time_to_target
from helpers import summary_config, summary_outcome, write_lines


def build_summary(*args, **kwargs) -> dict:
    """The summary as summary.json holds it."""
    return build(*args, **kwargs).to_dict()


pytestmark = pytest.mark.timeout(30)

BATCH = 32


def steps(count: int, step_s: float) -> list[dict]:
    return [{"step": n, "wall_s": n * step_s, "train_s": n * step_s, "samples": BATCH * n, "loss": 1.0,
             "data_s": 0.0, "compute_s": step_s, "comm_s": 0.0, "opt_s": 0.0, "bytes_sent": 0, "bytes_recv": 0,
             "round": None} for n in range(1, count + 1)]


def evals(curve: dict[int, float], step_s: float, metric: str = "test_accuracy") -> list[dict]:
    """One evaluation per (step: value); train_s and samples as a worker of `steps(.., step_s)` has them."""
    other = "test_loss" if metric == "test_accuracy" else "test_accuracy"
    return [{"step": n, "wall_s": n * step_s, "train_s": n * step_s, "samples": BATCH * n, metric: value,
             other: 0.5, "test_samples": 359, "eval_s": 1.0} for n, value in curve.items()]


def summary_of(tmp_path, curves: list[dict[int, float]], step_s: list[float], target: float,
               metric: str = "test_accuracy", eval_every: int = 5, estimator: str = "confirmed_crossing") -> dict:
    run = RunDir(tmp_path / "run")
    for rank, (curve, seconds) in enumerate(zip(curves, step_s)):
        write_lines(run.peer(rank).steps, steps(max(curve), seconds))
        write_lines(run.peer(rank).evals, evals(curve, seconds, metric))
        run.peer(rank).result.write_text(json.dumps({"rank": rank, "role": "worker", "evaluations": len(curve),
                                                     "eval_s": 1.0 * len(curve), "snapshot_s": 0.1}))
    declared = summary_config(metric, target)
    declared["target"] |= {"estimator": estimator, "bootstrap": 0}
    return build_summary(run, declared | {"eval_every": eval_every}, summary_outcome())


def test_the_crossing_is_interpolated_between_the_evaluations_around_it(tmp_path):
    # 0.5 at step 5, 0.9 at step 10: 0.8 is three quarters of the way, at step 8.75
    summary = summary_of(tmp_path, [{0: 0.1, 5: 0.5, 10: 0.9, 15: 0.95}], [2.0], target=0.8)
    assert summary["steps_to_target"] == pytest.approx(8.75)
    assert summary["time_to_target_s"] == pytest.approx(17.5)  # 8.75 steps of 2 s, not 20 s at step 10
    assert summary["samples_to_target"] == pytest.approx(8.75 * BATCH)
    assert summary["time_per_sample_s"] == pytest.approx(2.0 / BATCH)


def test_a_crossing_that_does_not_hold_at_the_next_evaluation_does_not_count(tmp_path):
    # 0.85 at step 5 drops to 0.7 at step 10; the crossing that holds is between steps 10 and 15 (0.9)
    summary = summary_of(tmp_path, [{0: 0.1, 5: 0.85, 10: 0.7, 15: 0.9, 20: 0.95}], [1.0], target=0.8)
    assert summary["steps_to_target"] == pytest.approx(12.5)
    assert summary["time_to_target_s"] == pytest.approx(12.5)


def test_a_crossing_at_the_last_evaluation_is_unconfirmed(tmp_path):
    summary = summary_of(tmp_path, [{0: 0.1, 5: 0.5, 10: 0.7, 15: 0.85}], [1.0], target=0.8)
    assert summary["accuracy_by_worker"]["worst"] == 0.85  # the run ended above the target ...
    assert summary["time_to_target_s"] is None and summary["samples_to_target"] is None  # ... unconfirmed
    assert summary["time_to_target_by_rank"] == {0: None}


def test_a_target_met_at_the_start_is_met_at_zero(tmp_path):
    summary = summary_of(tmp_path, [{0: 0.9, 5: 0.95, 10: 0.95}], [1.0], target=0.8)
    assert summary["time_to_target_s"] == 0 and summary["samples_to_target"] == 0
    assert summary["time_per_sample_s"] is None


def test_the_worst_worker_sets_time_and_samples_and_a_loss_target_is_met_from_above(tmp_path):
    # rank 0 (1 s steps): loss 1.0 -> 0.2 between steps 5 and 10, 0.6 at step 7.5 (7.5 s);
    # rank 1 (1.2 s steps): 0.8 -> 0.4 between steps 10 and 15, 0.6 at step 12.5 (15 s)
    curves = [{0: 2.0, 5: 1.0, 10: 0.2, 15: 0.1, 20: 0.1}, {0: 2.0, 5: 1.2, 10: 0.8, 15: 0.4, 20: 0.3}]
    summary = summary_of(tmp_path, curves, [1.0, 1.2], target=0.6, metric="test_loss")
    assert summary["time_to_target_by_rank"] == {0: pytest.approx(7.5), 1: pytest.approx(15.0)}
    assert summary["time_to_target_s"] == pytest.approx(15.0) and summary["steps_to_target"] == pytest.approx(12.5)
    assert summary["samples_to_target"] == pytest.approx(2 * 12.5 * BATCH)  # both workers' samples at step 12.5
    assert summary["time_per_sample_s"] == pytest.approx(15.0 / (2 * 12.5 * BATCH))


def test_the_summary_states_the_resolution_and_the_cost_of_evaluating(tmp_path):
    curves = [{0: 0.1, 5: 0.5, 10: 0.9, 15: 0.95}] * 2
    evaluation = summary_of(tmp_path, curves, [1.0, 1.0], target=0.8)["evaluation"]
    assert evaluation["interval_steps"] == 5 and evaluation["interval_samples"] == 2 * 5 * BATCH
    assert evaluation["test_samples"] == 359 and evaluation["evaluations"] == 4
    assert evaluation["after_training_s"] == 4.0 and evaluation["snapshot_pause_s"] == 0.1


# --- isotonic: the crossing of the curve's monotone fit ----------------------------------------------

def test_isotonic_pools_a_lucky_evaluation_with_the_dip_after_it(tmp_path):
    # 0.85 at step 10 then 0.75 at 15 pool into 0.80 at their centre, 12.5: the target 0.8 is met there,
    # where confirmed_crossing waits for two evaluations in a row (0.75 -> 0.9 between 15 and 20: 16.67)
    curve = {0: 0.1, 5: 0.5, 10: 0.85, 15: 0.75, 20: 0.9, 25: 0.95}
    isotonic = summary_of(tmp_path / "iso", [curve], [1.0], target=0.8, estimator="isotonic")
    confirmed = summary_of(tmp_path / "confirmed", [curve], [1.0], target=0.8)
    assert isotonic["steps_to_target"] == pytest.approx(12.5)
    assert isotonic["samples_to_target"] == pytest.approx(12.5 * BATCH)
    assert confirmed["steps_to_target"] == pytest.approx(15 + 5 * 0.05 / 0.15)


def test_isotonic_never_reads_past_the_last_evaluation(tmp_path):
    # the last two pool into 0.785 < 0.8: censored, although the last but one evaluation reached 0.85
    dipped = summary_of(tmp_path / "dip", [{0: 0.1, 5: 0.5, 10: 0.7, 15: 0.85, 20: 0.72}], [1.0], target=0.8,
                        estimator="isotonic")
    assert dipped["samples_to_target"] is None and dipped["time_to_target_s"] is None
    # still rising at the end: read up to the last evaluation (10 + 5 x 0.1 / 0.15), not past it
    rising = summary_of(tmp_path / "rise", [{0: 0.1, 5: 0.5, 10: 0.7, 15: 0.85}], [2.0], target=0.8,
                        estimator="isotonic")
    assert rising["steps_to_target"] == pytest.approx(10 + 5 * 0.1 / 0.15)
    assert rising["time_to_target_s"] == pytest.approx(2 * (10 + 5 * 0.1 / 0.15))
    below = summary_of(tmp_path / "below", [{0: 0.1, 5: 0.5, 10: 0.79}], [1.0], target=0.8, estimator="isotonic")
    assert below["steps_to_target"] is None


def test_isotonic_meets_a_loss_target_from_above(tmp_path):
    # loss 1.0 at 5, then 0.5 and 0.7 pool into 0.6 at 12.5: the target 0.6 is met there
    curves = [{0: 2.3, 5: 1.0, 10: 0.5, 15: 0.7, 20: 0.3}]
    summary = summary_of(tmp_path, curves, [1.0], target=0.6, metric="test_loss", estimator="isotonic")
    assert summary["steps_to_target"] == pytest.approx(12.5)


# --- the default never looks past the next evaluation --------------------------------------------------

DEFAULT_TARGET = yaml.safe_load((ROOT / "conf" / "config.yaml").read_text())["target"]
SCENARIO_STEPS = np.arange(0, 41, 10.0)


@pytest.mark.parametrize("curve, expected", [
    ([0.5, 0.6, 0.7, 0.8, 0.96], None),  # 0.96 at the last evaluation, unconfirmed: not reached
    ([0.5, 0.96, 0.97, 0.9, 0.9], 0.45 / 0.46 * 10),  # confirmed at step 20; later dips do not undo it
])
def test_the_default_estimator_decides_at_an_evaluation_from_the_next_one_alone(curve, expected):
    """Reaching 0.95 by the configured default: the crossing that the evaluations up to the one after it confirm."""
    step = crossing_step(SCENARIO_STEPS, curve, DEFAULT_TARGET | {"value": 0.95})
    assert step == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize("estimator", CAUSAL)
def test_a_causal_estimator_reads_the_same_crossing_off_every_longer_curve(estimator):
    """What a run that stopped at its crossing shows is what the whole run would have: on noisy curves, the
    crossing of the head of the curve up to the evaluation that confirms it equals the whole curve's."""
    rng = np.random.default_rng(1)
    target = {"metric": "test_accuracy", "value": 0.9, "estimator": estimator}
    checked = 0
    for _ in range(200):
        accuracy = rng.binomial(TEST_SAMPLES, CURVES["saturating"](EVAL_STEPS)) / TEST_SAMPLES
        whole = crossing_step(EVAL_STEPS, accuracy, target)
        heads = [crossing_step(EVAL_STEPS[:k], accuracy[:k], target) for k in range(2, len(EVAL_STEPS) + 1)]
        stop = next((k for k, step in enumerate(heads) if step is not None), None)  # the first head that crosses
        if stop is not None:
            assert heads[stop] == whole and all(step == whole for step in heads[stop:])
            checked += 1
    assert checked > 150


# --- synthetic learning curves with known crossings ---------------------------------------------------

EVAL_STEPS = np.arange(0, 101, 5.0)  # eval_every=5 over 100 steps
TEST_SAMPLES = 359  # the digits test split: accuracy moves in steps of 1/359
CURVES = {  # accuracy at a step: a saturating and an S-shaped curve, both from chance (0.1) to 0.97
    "saturating": lambda s: 0.97 - 0.87 * np.exp(-s / 25),
    "s-shaped": lambda s: 0.1 + 0.87 / (1 + np.exp(-(s - 30) / 8)),
}
STEEP = [0.5, 0.7, 0.8, 0.9]  # targets on the rising part of both curves (0.95 is on the plateau)


def known_crossing(curve, value: float) -> float:
    fine = np.linspace(0, 100, 1_000_001)
    return float(fine[np.argmax(curve(fine) >= value)])


def relative_errors(curve, value: float, estimator: str, draws: int = 1000) -> np.ndarray:
    """Estimated / known crossing - 1 over independent test sets (binomial accuracy at every evaluation);
    nan where the estimate is censored."""
    rng = np.random.default_rng(0)
    truth = known_crossing(curve, value)
    target = {"metric": "test_accuracy", "value": value, "estimator": estimator}
    found = []
    for _ in range(draws):
        accuracy = rng.binomial(TEST_SAMPLES, curve(EVAL_STEPS)) / TEST_SAMPLES
        step = crossing_step(EVAL_STEPS, accuracy, target)
        found.append(np.nan if step is None else step / truth - 1)
    return np.array(found)


@pytest.mark.parametrize("estimator", ["isotonic", "causal_isotonic"])
@pytest.mark.parametrize("shape", sorted(CURVES))
def test_isotonic_finds_known_crossings_within_two_percent(shape, estimator):
    for value in STEEP:
        noiseless = crossing_step(EVAL_STEPS, CURVES[shape](EVAL_STEPS), {"metric": "test_accuracy", "value": value,
                                                                         "estimator": estimator})
        assert noiseless == pytest.approx(known_crossing(CURVES[shape], value), rel=0.01)
        errors = relative_errors(CURVES[shape], value, estimator)
        assert not np.isnan(errors).any(), f"censored at {value}"
        assert abs(errors.mean()) < 0.02, f"bias {errors.mean():+.3f} at {value}"


def test_isotonic_is_less_noisy_than_confirmed_crossing_and_less_biased_near_the_plateau():
    """The measured reason for the default, on the same draws: as unbiased on the rising part and no noisier
    (less noisy where the curve flattens); near the plateau half the bias and far fewer censored runs."""
    spread = {}
    for estimator in ("isotonic", "confirmed_crossing"):
        spread[estimator] = [relative_errors(CURVES[shape], value, estimator).std() for shape in sorted(CURVES)
                             for value in STEEP]
    assert all(iso <= confirmed + 1e-3 for iso, confirmed in zip(*spread.values()))
    assert np.mean(spread["isotonic"]) < 0.92 * np.mean(spread["confirmed_crossing"])
    plateau = {estimator: relative_errors(CURVES["saturating"], 0.95, estimator)
               for estimator in ("isotonic", "confirmed_crossing")}
    assert 0.02 < abs(np.nanmean(plateau["isotonic"])) < 0.6 * abs(np.nanmean(plateau["confirmed_crossing"]))
    assert np.isnan(plateau["isotonic"]).mean() < 0.5 * np.isnan(plateau["confirmed_crossing"]).mean()


def test_causal_isotonic_is_less_noisy_than_confirmed_crossing_and_censors_less_near_the_plateau():
    """Why the default is causal_isotonic among the estimators that never look past the next evaluation."""
    spread = {estimator: [relative_errors(CURVES[shape], value, estimator).std() for shape in sorted(CURVES)
                          for value in STEEP] for estimator in CAUSAL}
    assert all(iso <= confirmed + 1e-3 for iso, confirmed in zip(spread["causal_isotonic"],
                                                                  spread["confirmed_crossing"]))
    assert np.mean(spread["causal_isotonic"]) < 0.92 * np.mean(spread["confirmed_crossing"])
    censored = {estimator: np.isnan(relative_errors(CURVES["saturating"], 0.95, estimator)).mean()
                for estimator in CAUSAL}
    assert censored["causal_isotonic"] < 0.75 * censored["confirmed_crossing"]


# --- the test-set bootstrap ------------------------------------------------------------------------------

FLIPPED = 0.02  # outcomes flipped at random at each evaluation


def expected(curve):
    """The expected accuracy of learning_logs' workers on `curve`."""
    return lambda s: curve(s) * (1 - 2 * FLIPPED) + FLIPPED


def learning_logs(u: np.ndarray, curve, step_s: float = 1.0):
    """A worker whose test sample j is right at an evaluation when its difficulty u_j is below the curve there
    (a sample, once learned, stays learned), with FLIPPED of the outcomes flipped: its evals, steps and outcomes."""
    rng = np.random.default_rng(int(u[0] * 1e9))
    correct = (u[None, :] < curve(EVAL_STEPS)[:, None]) ^ (rng.random((len(EVAL_STEPS), len(u))) < FLIPPED)
    evals = [{"step": int(s), "train_s": s * step_s, "test_accuracy": float(c.mean()), "test_loss": 1.0}
             for s, c in zip(EVAL_STEPS, correct)]
    steps = [{"step": n, "samples": BATCH * n, "train_s": n * step_s} for n in range(1, 101)]
    return evals, steps, correct


def test_the_bootstrap_interval_holds_the_known_crossing_and_its_spread_matches_fresh_test_sets(tmp_path):
    curve, value = CURVES["saturating"], 0.8
    truth = known_crossing(expected(curve), value) * BATCH  # samples of one worker
    target = {"metric": "test_accuracy", "value": value, "estimator": "isotonic", "bootstrap": 200}
    rng = np.random.default_rng(1)
    found, log_sds, covered = [], [], 0
    for n in range(60):
        evals, steps, correct = learning_logs(rng.random(TEST_SAMPLES), curve)
        path = tmp_path / f"outcomes{n}.npz"
        np.savez(path, step=EVAL_STEPS.astype(int), correct=correct, loss=np.zeros(correct.shape))
        figures = time_to_target({0: evals}, {0: steps}, {0: path}, target)
        interval = figures["samples_to_target_bootstrap"]
        assert interval["resamples"] == 200 and interval["censored"] == 0
        covered += interval["low"] <= truth <= interval["high"]
        found.append(figures["samples_to_target"])
        log_sds.append(interval["log_sd"])
    fresh = np.std(np.log(found), ddof=1)  # the crossing's spread over independent test sets
    assert 0.67 < np.mean(log_sds) / fresh < 1.5
    assert covered >= 0.85 * 60


def test_identical_workers_have_one_curve_and_different_ones_the_worst(tmp_path):
    rng = np.random.default_rng(2)
    target = {"metric": "test_accuracy", "value": 0.8, "estimator": "isotonic", "bootstrap": 50}
    early, steps, correct_early = learning_logs(rng.random(TEST_SAMPLES), CURVES["s-shaped"])
    late, _, correct_late = learning_logs(rng.random(TEST_SAMPLES), lambda s: CURVES["s-shaped"](s - 10))
    paths = {}
    for rank, correct in ((0, correct_early), (1, correct_late)):
        paths[rank] = tmp_path / f"peer{rank}.npz"
        np.savez(paths[rank], step=EVAL_STEPS.astype(int), correct=correct, loss=np.zeros(correct.shape))
    same = [dict(e, state_sha256=f"s{e['step']}") for e in early]
    alone = time_to_target({0: same}, {0: steps}, {0: paths[0]}, target)
    twice = time_to_target({0: same, 1: same}, {0: steps, 1: steps}, paths, target)
    assert twice["evaluated_states_identical"] is True
    assert twice["samples_to_target"] == pytest.approx(2 * alone["samples_to_target"])  # both workers' samples
    assert twice["samples_to_target_bootstrap"]["low"] == pytest.approx(2 * alone["samples_to_target_bootstrap"]["low"])
    apart = time_to_target({0: early, 1: late}, {0: steps, 1: steps}, paths, target)
    assert apart["evaluated_states_identical"] is None  # no digests: nothing known
    assert apart["time_to_target_by_rank"][1] > apart["time_to_target_by_rank"][0] + 5
    assert apart["time_to_target_s"] == apart["time_to_target_by_rank"][1]  # the worst worker's
    assert apart["samples_to_target_bootstrap"]["low"] > 2 * alone["samples_to_target_bootstrap"]["high"]
