"""diloco: the outer step on the averaged pseudo-gradient (unit tier, a two-worker all-reduce played by hand),
and real runs on digits (integration tier): it learns, workers agree after a sync, and each sync moves the
all-reduce's payload of the parameters, on the steps the schedule says."""
import pytest

from helpers import TINY_DIGITS_BYTES, run_two_peers_that_learn_and_agree, steps_of

pytestmark = pytest.mark.timeout(60)


# --- integration tier: real runs of two peers on digits (model=tiny) -----------------------------------------
@pytest.mark.integration
@pytest.mark.timeout(120)
def test_diloco_learns_agrees_after_syncs_and_moves_the_parameters_payload(run_dir):
    # 42 steps of 2 x 32 samples and 9 syncs; the last step is a sync: both hold the outer model
    summary = run_two_peers_that_learn_and_agree(run_dir, "strategy=diloco", "max_steps=42", "diloco.inner_steps=5",
                                                 "lr=0.003")
    for rank in (0, 1):
        steps = steps_of(run_dir, rank)
        synced = [s["step"] for s in steps if s["bytes_sent"]]
        assert synced == [5, 10, 15, 20, 25, 30, 35, 40, 42]  # every 5 steps, and the last
        # 2(N-1)/N x S = S for N=2: the tiny CNN's 9978 float32 parameters, counted by hand
        assert all((s["bytes_sent"], s["bytes_recv"]) == (TINY_DIGITS_BYTES, TINY_DIGITS_BYTES)
                   for s in steps if s["bytes_sent"])
        assert [s["round"] for s in steps if s["bytes_sent"]] == list(range(9))
    assert summary["config"]["optim"]["name"] == "adamw"
