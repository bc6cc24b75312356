"""strategy=hivemind. Unit tier: its knobs and run length. Integration tier: real hivemind peers on loopback
(tiny model, digits, small target batch sizes)."""

import pytest

from helpers import compose_config
from job.errors import ConfigError
from launchers.config import validate
from strategies.hivemind import target_epoch


@pytest.mark.parametrize("override, message", [
    ("hivemind.target_batch_size=16", "hivemind.target_batch_size=16 is smaller than batch_size=32"),
    ("hivemind.grad_compression=zip", "hivemind.grad_compression must be one of none, fp16"),
    ("hivemind.client_mode_peers=[0,1]", "at least one peer that is not in client mode"),
    ("hivemind.delay_grad_averaging=true", "needs hivemind.delay_optimizer_step=true"),
    ("hivemind.use_local_updates=true hivemind.delay_optimizer_step=true", "cannot delay the optimizer step"),
    ("hivemind.request_timeout=5", "below hivemind.matchmaking_time"),
    ("hivemind.run_id=exp.1", "hivemind.run_id must not contain '.'"),  # hivemind asserts it inside its optimizer
])
def test_bad_knobs_are_config_errors(override, message):
    with pytest.raises(ConfigError, match=message):
        validate(compose_config("strategy=hivemind", "peers=2", *override.split()))


@pytest.mark.parametrize("max_steps, peers, target, epochs", [
    (3, 2, 64, 3),      # 3 x 2 x 32 = 192 samples in epochs of 64
    (5, 3, 100, 5),     # 480 samples: 4.8 epochs, so the boundary after the 5th
    (2, 2, 1024, 1),    # fewer samples than one epoch: at least one epoch
])
def test_peers_stop_at_the_shared_epoch_boundary(max_steps, peers, target, epochs):
    cfg = compose_config("strategy=hivemind", f"peers={peers}", f"max_steps={max_steps}", "batch_size=32",
                         f"hivemind.target_batch_size={target}")
    assert target_epoch(cfg) == epochs


@pytest.mark.timeout(30)
def test_dht_start_tries_again_only_when_no_peer_answered():
    """A failed bootstrap is tried again (until the timeout); any other error is raised at the first attempt."""
    from strategies.hivemind import BOOTSTRAP_FAILED, start_dht

    class FailingHivemind:
        def __init__(self, error: str, failures: int):
            self.error, self.failures, self.attempts = error, failures, 0

        def DHT(self, **_):
            self.attempts += 1
            if self.attempts <= self.failures:
                raise RuntimeError(self.error)
            return "dht"

    unanswered = FailingHivemind(f"DHTNode {BOOTSTRAP_FAILED}: no initial peer answered", failures=2)
    assert start_dht(unanswered, 60.0) == "dht" and unanswered.attempts == 3
    broken = FailingHivemind("p2pd binary not found", failures=2)
    with pytest.raises(RuntimeError, match="p2pd binary not found"):
        start_dht(broken, 60.0)
    assert broken.attempts == 1
