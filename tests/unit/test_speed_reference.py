"""The speed reference (unit tier): its pauses leave the training model, its gradients, BatchNorm buffers, hooks and
the RNG untouched and keep to their budget; the summary says how far it moved; the report marks a run that moved
beyond tolerance or whose machine was slower than its block's median, and leaves no run out for it."""
import csv
import mmap
import re

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from helpers import compose_config, report_of, write_sweep
from job.device import PeerDevice
from job.errors import ConfigError
from launchers.config import validate
from job.speed_reference import SpeedReference
from metrics.summary.build import speed_reference_section

pytestmark = pytest.mark.timeout(60)

SETTINGS = OmegaConf.create({"speed_reference": {"samples": 4, "repetitions": 3, "max_share": 0.02}})


def model() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    return net.double()


def split():
    generator = torch.Generator().manual_seed(1)
    images = torch.randn(8, 1, 8, 8, generator=generator)
    return torch.utils.data.TensorDataset(images, torch.tensor([0, 1, 2, 0, 1, 2, 0, 1]))


def test_a_measurement_leaves_training_state_rng_and_hooks_untouched():
    net = model()
    net(split().tensors[0][:4].double()).sum().backward()  # gradients and BatchNorm buffers of a step in progress
    fired = []
    net.register_forward_hook(lambda *_: fired.append("module hook"))
    net[0].weight.register_post_accumulate_grad_hook(lambda _: fired.append("gradient hook"))
    state = {k: v.clone() for k, v in net.state_dict().items()}
    grads = [p.grad.clone() for p in net.parameters()]
    rng = torch.get_rng_state()
    reference = SpeedReference.for_run(SETTINGS, net, split(), PeerDevice(torch.device("cpu")))
    reference.measure(0, 0.0, force=True)
    assert fired == [] and torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(v, state[k]) for k, v in net.state_dict().items())
    assert all(torch.equal(p.grad, g) for p, g in zip(net.parameters(), grads))
    assert all(p.grad is None for p in reference.model.parameters())  # its own gradients are dropped
    recorded = reference.record()
    assert recorded["samples"] == 4 and recorded["dtype"] == "float64" and recorded["repetitions"] == 3
    assert recorded["measurements"][0]["seconds"] > 0 and recorded["cost_s"] >= recorded["measurements"][0]["seconds"]


def test_pauses_are_measured_only_within_the_budget_and_once_per_step():
    reference = SpeedReference.for_run(SETTINGS, model(), split(), PeerDevice(torch.device("cpu")))
    first = reference.measure(0, 0.0, force=True)
    assert first > 0
    assert reference.measure(5, 0.0) == 0.0  # 2 % of no training time: skipped
    assert reference.measure(10, 1000.0) > 0  # 2 % of 1000 s holds the cost so far and one more
    assert reference.measure(10, 1000.0, force=True) == 0.0  # measured at this step already
    assert [m["step"] for m in reference.record()["measurements"]] == [0, 10]
    assert SpeedReference.for_run(OmegaConf.create({"speed_reference": {"samples": 4, "repetitions": 0,
                                                                       "max_share": 0.02}}),
                                  model(), split(), PeerDevice(torch.device("cpu"))) is None


def recorded(seconds: list[float], cost_s: float = 0.5, wall_s: float = 100.0) -> dict:
    return {"measurements": [{"step": 5 * i, "wall_s": wall_s * i / (len(seconds) - 1), "seconds": s}
                             for i, s in enumerate(seconds)],
            "cost_s": cost_s, "samples": 4, "threads": 1, "dtype": "float32", "device": "cpu"}


def test_the_summary_says_how_far_each_worker_moved_and_what_it_cost():
    steady = recorded([0.100, 0.104, 0.097, 0.102, 0.103])  # median 0.102; held twice: 0.102 high, 0.104 low: 0
    slowed = recorded([0.100, 0.101, 0.150, 0.152, 0.149], cost_s=1.5)  # median 0.149; (0.150 - 0.101) / 0.149
    section = speed_reference_section({"speed_reference": {"tolerance": 0.1}},
                                      [{"rank": 0, "result": {"speed_reference": steady}},
                                       {"rank": 1, "result": {"speed_reference": slowed}},
                                       {"rank": 2, "result": {"strategy": {}}}])  # a parameter server: none
    assert set(section["by_rank"]) == {0, 1}
    assert section["by_rank"][0]["moved"] == 0.0
    assert section["by_rank"][0]["median_s"] == pytest.approx(0.102)
    assert section["by_rank"][1]["moved"] == pytest.approx(0.049 / 0.149)
    assert section["moved"] == pytest.approx(0.049 / 0.149) and section["beyond_tolerance"] is True
    assert section["median_s"] == pytest.approx((0.102 + 0.149) / 2)
    assert section["cost_share"] == pytest.approx(0.015)  # 1.5 s of the 100 s to the last measurement
    alone = speed_reference_section({"speed_reference": {"tolerance": 0.1}},
                                    [{"rank": 0, "result": {"speed_reference": steady}}])
    assert alone["beyond_tolerance"] is False
    assert speed_reference_section({}, [{"rank": 0, "result": None}]) is None


def test_a_far_out_measurement_is_a_blip_but_a_level_held_twice_is_a_move():
    # a steady run with one interrupted measurement (an 80 % blip), or two apart (each alone), stays within
    # tolerance: no level stands apart for two measurements in a row
    blip = recorded([0.100, 0.101, 0.099, 0.180, 0.100])
    blips = recorded([0.100, 0.150, 0.100, 0.101, 0.150, 0.100])
    # the same run slowed from its fourth measurement on: 0.179 held twice against 0.101 / median 0.101
    slowed = recorded([0.100, 0.101, 0.099, 0.180, 0.179])
    # too few measurements for a level: their range (start and end, 0.120 - 0.100) / median 0.110
    two = recorded([0.100, 0.120])
    sections = [speed_reference_section({"speed_reference": {"tolerance": 0.1}},
                                        [{"rank": 0, "result": {"speed_reference": r}}])
                for r in (blip, blips, slowed, two)]
    assert [s["moved"] for s in sections[:2]] == [0.0, 0.0] and not sections[1]["beyond_tolerance"]
    assert sections[2]["moved"] == pytest.approx(0.078 / 0.101) and sections[2]["beyond_tolerance"] is True
    assert sections[3]["moved"] == pytest.approx(0.020 / 0.110)


def summary_with(median_s: float, moved: float) -> dict:
    return {"speed_reference": {"median_s": median_s, "moved": moved, "tolerance": 0.1,
                                "beyond_tolerance": moved > 0.1,
                                "work": {"samples": 4, "threads": 1, "dtype": "float32", "device": "cpu"}}}


def test_the_report_marks_a_moved_run_and_a_slow_machine_and_leaves_neither_out(tmp_path):
    # block 1's allreduce run moved 30 % and ran 1.5 / 1.0 - 1 = 50 % slower than its block's median (1.0 s: the
    # baselines' 1.0 and 1.0, and its own 1.5); every other run is steady and at its block's median
    def job(strategy, peers, throughput, times, slow_block=None):
        return [(strategy, peers, 1, throughput, t,
                 {"summary": summary_with(1.5, 0.3) if b == slow_block else summary_with(1.0, 0.02)})
                for b, t in enumerate(times)]

    sweep = write_sweep(tmp_path / "sweep", {
        "allreduce": job("allreduce", 2, 150.0, [8.0, 9.0, 8.5], slow_block=1),
        "baseline_2x1": job("single", 2, 100.0, [10.0, 11.0, 10.5]),
        "baseline_1x1": job("single", 1, 60.0, [15.0, 15.0, 15.0])})
    markdown = report_of(sweep, out=tmp_path / "out")
    marks = [line for line in markdown.splitlines() if "machine speed moved" in line or "block's median" in line]
    assert marks and all("allreduce" in line for line in marks)
    assert "block 1, allreduce 2×1cpu: machine speed moved 30% during the run" in markdown
    assert "block 1, allreduce 2×1cpu: this run's machine was 50% slower than its block's median" in markdown
    assert "block 0," not in " ".join(marks) and "block 2," not in " ".join(marks)
    assert "- allreduce 2×1cpu: reached test_accuracy ≥ 0.9 in 3 of 3 blocks" in markdown  # no block left out
    assert re.search(r"- allreduce 2×1cpu: .*against single 2×1cpu: faster: .*, 3 blocks\)", markdown)
    rows = {(r["configuration"], r["config.block"]): r for r in csv.DictReader(open(tmp_path / "out" / "runs.csv"))}
    assert float(rows[("allreduce 2×1cpu", "1")]["speed_reference_moved"]) == 0.3
    assert float(rows[("allreduce 2×1cpu", "1")]["speed_reference_vs_block"]) == pytest.approx(0.5)
    assert float(rows[("allreduce 2×1cpu", "0")]["speed_reference_vs_block"]) == 0.0


@pytest.mark.parametrize("override, message", [
    ("speed_reference.samples=1", "speed_reference.samples must be >= 2"),
    ("speed_reference.repetitions=-1", "speed_reference.repetitions must be >= 0"),
    ("speed_reference.tolerance=0", "speed_reference.tolerance must be a fraction in (0, 1), got 0"),
    ("speed_reference.max_share=1.5", "speed_reference.max_share must be a fraction in (0, 1), got 1.5")])
def test_bad_settings_are_refused_before_launch(override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(compose_config(override))


def test_a_timing_spans_enough_passes_to_last_its_minimum_and_records_one_pass(monkeypatch):
    """On a clock that each pass moves by 3 ms: a timing needs 8 passes to last MIN_TIMING_S (20 ms), each timing
    records one pass's 3 ms, and the pause holds the calibration's 1 + 2 + 4 + 8 passes and 3 timings of 8."""
    from job import speed_reference

    class Clock:
        now = 0.0

        def perf_counter(self) -> float:
            return self.now

        def time(self) -> float:
            return 1e9 + self.now

        def advance(self) -> None:
            self.now += 0.003

    clock = Clock()
    monkeypatch.setattr(speed_reference, "time", clock)
    monkeypatch.setattr(SpeedReference, "_pass", clock.advance)
    assert speed_reference.MIN_TIMING_S == 0.02
    reference = SpeedReference.for_run(SETTINGS, model(), split(), PeerDevice(torch.device("cpu")))
    reference.measure(0, 0.0, force=True)
    recorded = reference.record()
    (measured,) = recorded["measurements"]
    assert (recorded["passes"], recorded["repetitions"]) == (8, 3)
    assert measured["seconds"] == pytest.approx(0.003)
    assert measured["pause_s"] == pytest.approx((1 + 2 + 4 + 8 + 3 * 8) * 0.003)
    reference.measure(10, 1000.0)
    assert reference.record()["passes"] == 8  # the same work at every measurement, not calibrated again
    assert reference.record()["measurements"][1]["pause_s"] == pytest.approx(3 * 8 * 0.003)


class PageToucher(nn.Module):
    """A linear layer whose every forward maps `pages` fresh small pages and touches each once."""

    def __init__(self, pages: int):
        super().__init__()
        self.pages, self.linear = pages, nn.Linear(64, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        area = mmap.mmap(-1, self.pages * mmap.PAGESIZE)
        area.madvise(mmap.MADV_NOHUGEPAGE)  # one fault per small page, whatever the machine's huge-page setting
        for offset in range(0, len(area), mmap.PAGESIZE):
            area[offset] = 1
        area.close()
        return self.linear(x.flatten(1))


def test_minor_faults_count_the_pages_one_pass_maps(monkeypatch):
    # several passes per timing (a 50 ms minimum), so a count per timing or per measurement would be several times off
    from job import speed_reference

    monkeypatch.setattr(speed_reference, "MIN_TIMING_S", 0.05)
    pages = 2048
    reference = SpeedReference.for_run(SETTINGS, PageToucher(pages).double(), split(), PeerDevice(torch.device("cpu")))
    reference.measure(0, 0.0, force=True)
    recorded = reference.record()
    assert recorded["passes"] > 1, recorded
    faults = recorded["measurements"][0]["minor_faults"]
    assert pages <= faults < 1.1 * pages, (faults, recorded["passes"])
