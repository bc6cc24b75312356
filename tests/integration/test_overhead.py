"""bench/overhead.py's raw arms run under their engines' own launchers: one step time per step, from rank 0 only."""
import pytest

from bench.overhead import raw_step_times


@pytest.mark.integration
@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["plain", "ddp", "horovod"])
def test_each_raw_loop_runs_under_its_launcher(mode):
    if mode == "horovod":
        pytest.importorskip("horovod.torch", reason="Horovod is not built (make setup)")
    times = raw_step_times(mode, "tiny", 32, 3)
    assert len(times) == 3  # rank 1 prints none: two ranks would give 6
    assert all(0 < t < 30 for t in times)
