"""The training loop's gradient clock and step phases (unit tier): job.loop.GradientClock remembers when backward
accumulated its last gradient, which ends the step's compute time; step_phases splits the step, with the update's time
as the strategies take it (Strategy.timed_optimizer_step)."""
import time

import pytest
import torch

import strategies.base
from job.device import PeerDevice
from job.loop import GradientClock, communicated, step_phases
from strategies.base import StepReport
from strategies.single import Single

CPU = PeerDevice(torch.device("cpu"))

pytestmark = pytest.mark.timeout(30)


class Recorder:
    """Records when each parameter's gradient was accumulated (its own hooks, registered before the clock's)."""

    def __init__(self, net):
        self.times = []
        for p in net.parameters():
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(lambda _: self.times.append(time.perf_counter()))


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))


def backward(net):
    x = torch.randn(8, 5, generator=torch.Generator().manual_seed(1))
    loss = net(x).square().mean()
    before = time.perf_counter()
    loss.backward()
    return before, time.perf_counter()


def test_the_clock_keeps_the_time_of_the_last_gradient():
    net = model()
    recorder = Recorder(net)
    clock = GradientClock(net.parameters(), CPU)
    before, after = backward(net)
    assert len(recorder.times) == 4
    # the clock's hook runs after the recorder's on the same gradient: after the last one, within backward
    assert before <= recorder.times[-1] <= clock.last_ready <= after
    clock.close()


def test_frozen_parameters_are_not_watched_and_close_removes_the_hooks():
    net = model()
    net[0].weight.requires_grad_(False)
    clock = GradientClock(net.parameters(), CPU)
    assert len(clock.handles) == 3
    backward(net)
    seen = clock.last_ready
    clock.close()
    backward(net)
    assert clock.last_ready == seen  # no hook left after close()


def test_gradients_accumulated_over_two_backward_passes_move_the_clock_each_time():
    net = model()
    clock = GradientClock(net.parameters(), CPU)
    backward(net)
    first = clock.last_ready
    backward(net)
    assert clock.last_ready > first
    clock.close()


def test_compute_time_runs_from_the_start_to_the_last_gradient():
    net = model()
    recorder = Recorder(net)
    clock = GradientClock(net.parameters(), CPU)
    started = time.perf_counter()
    clock.start()
    backward(net)
    time.sleep(0.05)  # after backward: not compute
    assert clock.compute_s(started) == pytest.approx(recorder.times[-1] - started, abs=1e-3)
    clock.start()
    assert clock.compute_s(time.perf_counter()) == 0.0  # no gradient yet this step
    clock.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_compute_time_is_the_kernels_not_their_launches():
    gpu = PeerDevice(torch.device("cuda", 0))
    net = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(8)]).cuda()
    clock = GradientClock(net.parameters(), gpu)
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


def test_a_contended_step_that_sent_nothing_has_no_communication_and_its_waiting():
    """single's step on a contended CPU, 0.9 s after its data: forward and backward ran 0.3 s and waited 0.4 s for a
    CPU, the update took 0.1 s, and the thread waited 0.1 s more for a CPU before the step ended. It sent nothing."""
    report = StepReport(opt_s=0.1)
    phases = step_phases(0.9, compute_s=0.3, opt_s=0.1, cpu_wait_s=0.5, communicates=communicated(report))
    assert phases["comm_s"] == 0.0 and phases["wait_s"] == pytest.approx(0.4 + 0.1)
    assert phases["compute_s"] == 0.3 and phases["opt_s"] == 0.1


def test_a_communicating_step_counts_its_transfer_as_communication_and_its_waits_for_others_cpu_as_waiting():
    """An all-reduce step of 1.0 s: compute 0.3 s, 0.2 s of waits for a CPU that other processes took, update 0.1 s,
    0.4 s blocked in the transfer; a step that only timed its link (overlapped with backward) communicated too."""
    for report in (StepReport(opt_s=0.1, bytes_sent=100, bytes_recv=100), StepReport(opt_s=0.1, link_s=0.2)):
        phases = step_phases(1.0, compute_s=0.3, opt_s=0.1, cpu_wait_s=0.2, communicates=communicated(report))
        assert phases["comm_s"] == pytest.approx(0.4) and phases["wait_s"] == pytest.approx(0.2)


def test_a_wait_is_lost_to_sharing_unless_the_peers_own_threads_held_its_cores_in_the_same_phase():
    """The clocks (wait ns, process CPU s, thread CPU s) of a step: the batch, then backward waiting 0.3 s for a CPU
    while the peer's other threads used 0.1 s, then the all-reduce, whose threads used 0.5 s while the training
    thread slept. On one core, backward lost 0.2 s to other processes; on two, the 0.1 s held both for 0.05 s at
    most, so it lost 0.25 s. The all-reduce's CPU later excuses none of it."""
    clock = GradientClock(model().parameters(), CPU)
    at_batch = (0, 0.0, 0.0)
    clock.at_start = (0, 0.1, 0.1)
    clock.at_ready = (300_000_000, 1.2, 1.1)
    clock.clocks = lambda: (300_000_000, 1.7, 1.1)
    clock.cores = 1
    assert clock.waits(at_batch)[1:] == pytest.approx((0.2, 0.0))  # none of it after the last gradient
    clock.cores = 2
    assert clock.waits(at_batch)[1:] == pytest.approx((0.25, 0.0))
    clock.close()


def test_in_a_communicating_step_a_wait_for_the_peers_own_threads_is_communication_and_one_for_others_waiting():
    """A 1.3 s step after its data: backward ran 0.4 s and waited 0.2 s for a CPU while the peer's other threads used
    0.1 s; after the last gradient the training thread blocked 0.2 s on the all-reduce and waited 0.5 s for a CPU while
    the all-reduce's threads used 0.3 s. On one core, 0.1 s of backward's wait and 0.2 s of the later one were other
    processes': backward's stays in compute (0.5 s), the later one is waiting; the 0.1 s and 0.3 s our threads took are
    communication, with the 0.2 s blocked (0.6 s). On two cores our threads held both for half as long: 0.05 s of
    backward's wait and 0.15 s of the later one are communication (0.4 s), the rest waiting (0.05 + 0.35 s). A step
    that did not communicate has all of it as waiting."""
    clock = GradientClock(model().parameters(), CPU)
    at_batch = (0, 0.0, 0.0)
    clock.at_start = (0, 0.1, 0.1)
    clock.at_ready = (200_000_000, 0.6, 0.5)
    clock.clocks = lambda: (700_000_000, 0.9, 0.5)
    for cores, comm_s, wait_s, lost_s, after_s in ((1, 0.6, 0.2, 0.3, 0.2), (2, 0.4, 0.4, 0.5, 0.35)):
        clock.cores = cores
        cpu_wait_s, lost, lost_after = clock.waits(at_batch)
        assert (lost, lost_after) == pytest.approx((lost_s, after_s))
        phases = step_phases(1.3, compute_s=0.6 - clock.wait_s(), opt_s=0.0, cpu_wait_s=cpu_wait_s,
                             communicates=True)
        assert phases["compute_s"] == pytest.approx(0.5)
        assert phases["comm_s"] == pytest.approx(comm_s) and phases["wait_s"] == pytest.approx(wait_s)
        alone = step_phases(1.3, compute_s=0.5, opt_s=0.0, cpu_wait_s=cpu_wait_s, communicates=False)
        assert alone["comm_s"] == 0.0 and alone["wait_s"] == pytest.approx(0.8)
    clock.close()


class UpdateThatWaited:
    """An optimizer whose update runs 0.1 s, of which the training thread waits 0.06 s for a CPU (its schedstat)."""

    waited_s = 0.0

    def step(self):
        time.sleep(0.1)
        self.waited_s += 0.06


def test_a_wait_for_a_cpu_inside_the_update_is_counted_once_as_waiting(monkeypatch):
    """A step 0.5 s blocked in its transfer: compute 0.3 s, then the update, whose 0.06 s of waiting for a CPU are the
    loop's only CPU wait (cpu_wait_s): the step's comm_s is the transfer's 0.5 s and wait_s the 0.06 s."""
    update = UpdateThatWaited()
    monkeypatch.setattr(strategies.base, "thread_wait_s", lambda: update.waited_s)
    strategy = Single(None, None, None)
    strategy.optimizer = update
    before = time.perf_counter()
    opt_s = strategy.timed_optimizer_step()
    update_wall_s = time.perf_counter() - before
    assert update_wall_s - 0.06 - 0.02 <= opt_s <= update_wall_s - 0.06  # 0.02 s: the call around the update
    phases = step_phases(0.3 + update_wall_s + 0.5, compute_s=0.3, opt_s=opt_s, cpu_wait_s=0.06, communicates=True)
    assert phases["comm_s"] == pytest.approx(0.5, abs=0.02) and phases["wait_s"] == pytest.approx(0.06, abs=0.02)


def test_a_wait_between_the_update_clocks_reads_never_makes_the_update_negative(monkeypatch):
    """The thread is preempted for 5 ms between the two reads that end a 1 ms update (the clock, its schedstat): the
    update must come out at least 0, the wait being counted by schedstat whatever the order of the reads."""
    clock = {"now": 0.0, "waited": 0.0, "updated": False}

    def perf_counter():
        now = clock["now"]
        if clock["updated"]:  # preempted right after this read
            clock["now"] += 0.005
            clock["waited"] += 0.005
        return now

    class Update:
        def step(self):
            clock["now"] += 0.001
            clock["updated"] = True

    monkeypatch.setattr(strategies.base, "thread_wait_s", lambda: clock["waited"])
    monkeypatch.setattr(strategies.base.time, "perf_counter", perf_counter)
    strategy = Single(None, None, None)
    strategy.optimizer = Update()
    assert 0 <= strategy.timed_optimizer_step() <= 0.001 + 1e-9


def test_an_averaging_round_that_found_no_group_counts_its_matchmaking_as_communication():
    """hivemind's step at an epoch's end, 2.5 s: compute 0.3 s, the update 0.2 s and 2 s of matchmaking, whether it
    found no group (no bytes, no all-reduce time: its report still names the round) or averaged with one."""
    failed = StepReport(opt_s=0.2, round=3, extra={"link_s": 0.0})
    averaged = StepReport(opt_s=0.2, round=3, bytes_sent=100, bytes_recv=100, extra={"link_s": 0.0})
    for report in (failed, averaged):
        phases = step_phases(2.5, compute_s=0.3, opt_s=0.2, cpu_wait_s=0.0, communicates=communicated(report))
        assert phases["comm_s"] == pytest.approx(2.0) and phases["wait_s"] == 0.0
