"""localsgd (integration tier: real runs of two peers on digits, model=tiny): synchronous DDP steps first, then
local steps with a model average every `every` steps and at the end; it learns, workers agree after the last
average, and each round moves the all-reduce's payload of the model, on the steps the schedule says."""
import pytest

from helpers import TINY_DIGITS_BYTES, run_two_peers_that_learn_and_agree, steps_of

pytestmark = pytest.mark.timeout(120)


@pytest.mark.integration
def test_localsgd_learns_agrees_after_averaging_and_moves_the_models_payload(run_dir):
    # 40 steps of 2 x 32 samples; the last step averages: both hold the same model
    summary = run_two_peers_that_learn_and_agree(run_dir, "strategy=localsgd", "max_steps=40",
                                                 "localsgd.warmup_steps=4", "localsgd.every=5")
    for rank in (0, 1):
        steps = steps_of(run_dir, rank)
        moved = [s["step"] for s in steps if s["bytes_sent"]]
        # DDP on steps 1-4, then an average after every 5 local steps (9, 14, ...), and the last step
        assert moved == [1, 2, 3, 4, 9, 14, 19, 24, 29, 34, 39, 40]
        # 2(N-1)/N x S = S for N=2: the tiny CNN's 9978 float32 gradients (DDP) or parameters (average)
        assert all((s["bytes_sent"], s["bytes_recv"]) == (TINY_DIGITS_BYTES, TINY_DIGITS_BYTES)
                   for s in steps if s["bytes_sent"])
        # warm-up rounds overlap backward (link_s); averaging rounds are exposed communication
        assert [s["step"] for s in steps if "link_s" in s] == [1, 2, 3, 4]
    assert summary["network"] is not None and summary["peers"][0]["result"]["strategy"]["averaging_rounds"] == 8
