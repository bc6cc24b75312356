"""What a run records about the CPUs: per step, the peer process's CPU time and run-queue delay
(metrics.recording.machine.ProcessClock); per run, the machine around it (MachineSampler, summary.json `machine`).

Each figure is checked against an independent clock or process: a sleeping step uses no CPU; a busy
step was either on a CPU or waiting for one for its whole wall time; a busy process outside the run shows
up as other processes' CPU, one the launcher reaped as the run's own."""
import threading
import time

import pytest

from metrics.recording.machine import ProcessClock


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def burn(cpu_seconds: float) -> None:
    """Spin until this thread has used cpu_seconds of CPU (however busy the machine is)."""
    end = time.thread_time() + cpu_seconds
    while time.thread_time() < end:
        pass


def clocked(work) -> tuple[dict, float]:
    """(ProcessClock's cpu_s and runq_s, wall seconds) of one call of work()."""
    clock = ProcessClock()
    clock.start()
    t0 = time.perf_counter()
    work()
    wall = time.perf_counter() - t0
    return clock.since_start(), wall


@pytest.mark.timeout(60)
def test_a_sleeping_step_uses_no_cpu():
    """Two steps of the same length, asleep and busy: the sleeping one's CPU time and run-queue delay are a small
    share of the busy one's time on (or waiting for) a CPU."""
    asleep, _ = clocked(lambda: time.sleep(0.5))
    busy, _ = clocked(lambda: spin(0.5))
    assert asleep["cpu_s"] < 0.1 * busy["cpu_s"]
    if asleep["runq_s"] is not None:
        assert asleep["runq_s"] < 0.1 * (busy["cpu_s"] + busy["runq_s"])


@pytest.mark.timeout(60)
def test_a_busy_step_is_on_a_cpu_or_waiting_for_one_all_along():
    if not ProcessClock().has_schedstat:
        pytest.skip("this kernel keeps no /proc/<pid>/task/<tid>/schedstat")
    used, wall = clocked(lambda: spin(0.6))
    assert 0 < used["cpu_s"] <= 1.05 * wall  # one busy thread, however many others the machine runs
    assert used["cpu_s"] + used["runq_s"] == pytest.approx(wall, rel=0.1)


@pytest.mark.timeout(60)
def test_threads_add_up_and_new_threads_count():
    def two_threads():
        workers = [threading.Thread(target=burn, args=(0.2,)) for _ in range(2)]  # started after start()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    used, wall = clocked(two_threads)
    assert 0.4 <= used["cpu_s"] <= 2.05 * wall  # both threads' 0.2 s of CPU, never more than 2 threads' wall


def test_core_times_keep_interrupts_apart_as_part_of_busy(tmp_path):
    """/proc/stat columns: user nice system idle iowait irq softirq steal; only the cores asked for count."""
    import os

    from metrics.recording.machine import cpu_times

    stat = tmp_path / "stat"
    stat.write_text("cpu  1 1 1 1 1 1 1 1 0 0\n"
                    "cpu0 100 0 20 500 3 1 9 2 0 0\n"
                    "cpu1 50 5 10 600 0 4 16 1 0 0\n"
                    "intr 12345\n")
    tick = 1 / os.sysconf("SC_CLK_TCK")
    found = cpu_times({1}, str(stat))
    assert found == pytest.approx({"busy_s": 85 * tick, "irq_s": 20 * tick, "steal_s": 1 * tick, "all_s": 686 * tick})
    assert cpu_times({0, 1}, str(stat))["irq_s"] == pytest.approx(30 * tick)
