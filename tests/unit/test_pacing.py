"""job/pacing.py: a paced step's phases last k x their calibrated time, backward is paced per gradient, and a slot
that ran past its deadline is counted."""
import threading
import time

import torch
from torch import nn

from job.pacing import Calibration, Pacer, Recorder


def two_layers() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))


def paced_step(model: nn.Module, pacer: Pacer, forward_work_s: float = 0.0) -> float:
    """One step through the pacer's marks; returns its wall time. forward_work_s: CPU spent in forward."""
    start = time.perf_counter()
    pacer.data()
    x = torch.ones(4, 8)
    pacer.forward()
    loss = model(x).sum()
    spin_until = time.perf_counter() + forward_work_s
    while time.perf_counter() < spin_until:
        pass
    pacer.backward()
    loss.backward()
    pacer.opt()
    pacer.end()
    return time.perf_counter() - start


def test_a_paced_step_lasts_k_times_its_calibrated_phases():
    model = two_layers()
    calibration = Calibration(data_s=0.01, forward_s=0.02, grad_ready_s=(0.03, 0.03, 0.01, 0.01), opt_s=0.005)
    pacer = Pacer(calibration, k=3, params=model.parameters())
    step_s = paced_step(model, pacer)
    alone_s = 0.01 + 0.02 + 0.03 + 0.005  # data, forward, the last gradient, the update
    assert step_s >= 3 * alone_s
    assert pacer.log.overruns == 0


def test_each_gradient_is_handed_over_no_earlier_than_its_paced_offset():
    model = two_layers()
    offsets = (0.04, 0.04, 0.01, 0.01)  # the first layer's gradients come last, as in backward
    pacer = Pacer(Calibration(data_s=0.0, forward_s=0.0, grad_ready_s=offsets, opt_s=0.0), k=2,
                  params=model.parameters())
    seen: dict[int, float] = {}

    def handed_over(index: int):
        def hook(_: torch.Tensor) -> None:
            seen[index] = time.perf_counter()
        return hook

    for index, param in enumerate(model.parameters()):  # registered after the pacer's: sees the paced hand-over
        param.register_post_accumulate_grad_hook(handed_over(index))
    paced_step(model, pacer)
    for index, offset in enumerate(offsets):
        assert seen[index] - pacer.backward_start >= 2 * offset


def test_a_phase_longer_than_its_slot_is_an_overrun_and_is_late():
    model = two_layers()
    pacer = Pacer(Calibration(data_s=0.0, forward_s=0.005, grad_ready_s=(0.0,) * 4, opt_s=0.0), k=2,
                  params=model.parameters())
    paced_step(model, pacer, forward_work_s=0.05)
    assert pacer.log.overruns >= 1
    assert max(pacer.log.late_s) >= 0.05 - 2 * 0.005 - 0.001


def test_the_recorder_sees_the_last_layer_s_gradient_before_the_first_s():
    model = two_layers()
    recorder = Recorder(model.parameters())
    for _ in range(3):
        recorder.mark("data")
        x = torch.ones(4, 8)
        recorder.mark("forward")
        loss = model(x).sum()
        recorder.mark("backward")
        loss.backward()
        recorder.mark("opt")
        recorder.mark("end")
    calibration = recorder.calibration(skip=1)
    first_weight, last_weight = calibration.grad_ready_s[0], calibration.grad_ready_s[2]
    assert last_weight < first_weight
    assert calibration.compute_s >= calibration.forward_s


def test_a_calibration_survives_its_file(tmp_path):
    calibration = Calibration(data_s=0.1, forward_s=0.2, grad_ready_s=(0.3, 0.4), opt_s=0.05)
    calibration.save(tmp_path / "c.json")
    assert Calibration.load(tmp_path / "c.json") == calibration


def test_the_other_threads_cpu_in_a_phase_is_charged_to_its_slot():
    """A thread that burns CPU during forward (communication, on a core the peer would share) lengthens the slot by
    k x what it burned, as measured by that thread itself."""
    model = two_layers()
    calibration = Calibration(data_s=0.0, forward_s=0.01, grad_ready_s=(0.0,) * 4, opt_s=0.0)
    pacer = Pacer(calibration, k=2, params=model.parameters())
    burned: list[float] = []

    def burn() -> None:
        start = time.thread_time()
        while time.thread_time() - start < 0.05:
            pass
        burned.append(time.thread_time() - start)

    pacer.data()
    pacer.forward()
    started = time.perf_counter()
    worker = threading.Thread(target=burn)
    worker.start()
    worker.join()
    pacer.backward()
    assert time.perf_counter() - started >= 2 * (0.01 + burned[0])
