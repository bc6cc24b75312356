"""The training loop's gradient-ready hook (unit tier): job.loop.GradientClock hands each
parameter to the strategy once, during backward, and remembers when the last one came."""
import time

import pytest
import torch

from job.device import PeerDevice
from job.loop import GradientClock

CPU = PeerDevice(torch.device("cpu"))

pytestmark = pytest.mark.timeout(30)


class RecordingStrategy:
    """Records each gradient_ready call: the parameter, its gradient at that moment, and when."""

    def __init__(self):
        self.calls = []

    def gradient_ready(self, param):
        self.calls.append((param, None if param.grad is None else param.grad.clone(), time.perf_counter()))


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))


def backward(net):
    x = torch.randn(8, 5, generator=torch.Generator().manual_seed(1))
    loss = net(x).square().mean()
    before = time.perf_counter()
    loss.backward()
    return before, time.perf_counter()


def test_every_parameter_is_handed_over_once_with_its_gradient_during_backward():
    net, strategy = model(), RecordingStrategy()
    clock = GradientClock(net.parameters(), strategy, CPU)
    before, after = backward(net)
    params = list(net.parameters())
    assert len(strategy.calls) == 4
    assert sorted(map(id, (p for p, _, _ in strategy.calls))) == sorted(map(id, params))  # each one, once
    for param, grad, at in strategy.calls:
        assert before <= at <= after  # during backward, not after it
        torch.testing.assert_close(grad, param.grad)  # its gradient was complete when handed over
    # backward runs from the output: the last layer's parameters are ready first
    first_two = {id(p) for p, _, _ in strategy.calls[:2]}
    assert first_two == {id(params[2]), id(params[3])}
    clock.close()


def test_the_clock_keeps_the_time_of_the_last_gradient():
    net, strategy = model(), RecordingStrategy()
    clock = GradientClock(net.parameters(), strategy, CPU)
    backward(net)
    times = [at for _, _, at in strategy.calls]
    # the clock reads the time just before handing the gradient over: between the last two hand-overs
    assert times[-2] <= clock.last_ready <= times[-1]
    clock.close()


def test_frozen_parameters_are_not_handed_over_and_close_removes_the_hooks():
    net, strategy = model(), RecordingStrategy()
    net[0].weight.requires_grad_(False)
    clock = GradientClock(net.parameters(), strategy, CPU)
    backward(net)
    assert len(strategy.calls) == 3 and all(p is not net[0].weight for p, _, _ in strategy.calls)
    clock.close()
    backward(net)
    assert len(strategy.calls) == 3  # no hook left after close()


def test_gradients_accumulated_over_two_backward_passes_are_handed_over_each_time():
    net, strategy = model(), RecordingStrategy()
    clock = GradientClock(net.parameters(), strategy, CPU)
    backward(net)
    first = clock.last_ready
    backward(net)
    assert len(strategy.calls) == 8 and clock.last_ready > first
    clock.close()


def test_compute_time_runs_from_the_start_to_the_last_gradient():
    net, strategy = model(), RecordingStrategy()
    clock = GradientClock(net.parameters(), strategy, CPU)
    started = time.perf_counter()
    clock.start()
    backward(net)
    time.sleep(0.05)  # after backward: not compute
    assert clock.compute_s(started) == pytest.approx(strategy.calls[-1][2] - started, abs=1e-3)
    clock.start()
    assert clock.compute_s(time.perf_counter()) == 0.0  # no gradient yet this step
    clock.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_compute_time_is_the_kernels_not_their_launches():
    gpu = PeerDevice(torch.device("cuda", 0))
    net = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(8)]).cuda()
    clock = GradientClock(net.parameters(), RecordingStrategy(), gpu)
    x = torch.randn(4096, 4096, device="cuda")
    gpu.synchronize()
    started = time.perf_counter()
    clock.start()
    net(x).square().mean().backward()
    launched = time.perf_counter() - started
    gpu.synchronize()
    done = time.perf_counter() - started
    compute = clock.compute_s(started)
    assert launched < compute <= done  # the kernels ran past the moment Python returned from backward
    clock.close()
