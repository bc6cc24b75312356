"""bench/link_rate.py's rule (unit tier): which candidate rate may be the default link's, from rows shaped as its
measurements write them."""
import pytest

from bench.link_rate import choose, judged

pytestmark = pytest.mark.timeout(30)


def row(rate: float, carried: float, comm: dict, link_faithful=True, cpu_faithful=True) -> dict:
    runs = {name: {"comm_share": share, "link": {"faithful": link_faithful}, "cpu_faithful": cpu_faithful}
            for name, share in comm.items()}
    return {"rate_mbit": rate, "probe_busy": {"worst_carried_share": carried}, "runs": runs}


def test_a_rate_fits_only_where_the_link_held_the_peers_kept_their_cpu_and_communication_weighs():
    rows = [judged(row(150, 0.99, {"ring": 0.4, "ps": 0.8}), 0.95, 0.5),
            judged(row(200, 0.97, {"ring": 0.3, "ps": 0.7}, cpu_faithful=False), 0.95, 0.5),  # the wire took a core
            judged(row(300, 0.90, {"ring": 0.3, "ps": 0.7}), 0.95, 0.5),                      # the probe fell short
            judged(row(400, 0.99, {"ring": 0.2, "ps": 0.7}, link_faithful=False), 0.95, 0.5),  # a run's link did not
            judged(row(500, 0.99, {"ring": 0.2, "ps": 0.4}), 0.95, 0.5)]                      # communication too light
    assert [r["fits"] for r in rows] == [True, False, False, False, False]
    assert rows[0]["heaviest"] == "ps" and rows[0]["heaviest_comm_share"] == 0.8
    assert choose(rows, 0.95, 0.5)["rate_mbit"] == 150
    assert judged(row(200, 0.97, {"ring": 0.3, "ps": 0.7}, cpu_faithful=None), 0.95, 0.5)["fits"]  # not judged: kept


def test_the_headline_estimate_counts_every_run_of_a_block_the_control_arm_included():
    from bench.link_rate import headline_s

    def run(wall_s: float) -> dict:  # a run that takes wall_s whatever its steps and evaluations
        return {"fixed_s": wall_s, "step_s": 0.0, "eval_s": 0.0, "snapshot_s": 0.0}

    runs = {"ring": run(300), "stepwise": run(400), "ps": run(500)}
    baselines = {"single_2": run(20), "single_1": run(1)}
    # the sweep's plan as typed: 3 blocks of ring, stepwise, ps, baseline_2x1, baseline_1x1 and baseline_2x1_control
    assert headline_s(runs, baselines) == 3 * (300 + 400 + 500 + 20 + 1 + 20)
