"""summary.json's `machine` section: how busy the machine was around the run, from the launcher's machine
samples (metrics/recording/machine.py: MachineSampler, and the per-step cpu_s and runq_s it defines)."""
import statistics
from pathlib import Path

from metrics.recording.jsonl import read_jsonl
from metrics.recording.machine import fingerprint

ALONE_OTHER_CPU_SHARE = 0.05  # the `alone` rule: others used at most 5 % of the cores' time ...
ALONE_STEAL_SHARE = 0.01      # ... the hypervisor took at most 1 % ...; and no other process held the machine lock

METHODS = {
    "cpu_s": "per step, CPU time of the peer process (all its threads; CLOCK_PROCESS_CPUTIME_ID) from the start to "
             "the end of the step; one thread busy all step long gives cpu_s = the step's wall time",
    "runq_s": "per step, run-queue delay of the peer process's threads (sum over /proc/self/task/*/schedstat "
              "field 2): time they were ready to run but waited for a CPU; a thread that ended during the step "
              "loses its share",
    "wall_s_per_step": "per peer, mean over its steps of data_s + compute_s + opt_s + comm_s (the step's span), "
                       "beside cpu_s_per_step and runq_s_per_step (means of cpu_s and runq_s)",
    "machine": "fingerprint = the machine the run was summarised on (metrics/recording/machine.py fingerprint); "
               "sampled by the launcher once a second from before the first process starts to after the last has "
               "ended (RUN/.avgbench/machine.jsonl), over the usable cores (os.sched_getaffinity): "
               "cpu_pressure_share = /proc/pressure/cpu 'some' total / wall (share of the time some runnable task, "
               "ours included, waited for a CPU); steal_share = /proc/stat steal / all CPU time; load_mean, "
               "load_max = 1-minute load average; other_cpu_share = (busy CPU time of the cores - CPU time of "
               "the launcher and the processes it reaped) / (cores x wall), at least 0 (the launcher is its "
               "descendants' subreaper: a daemon whose parent ended first, such as Open MPI's orted after mpirun, "
               "is reaped by it and counts as the run's); "
               f"alone = other_cpu_share <= {ALONE_OTHER_CPU_SHARE} and steal_share <= {ALONE_STEAL_SHARE} and "
               "no other process held the machine lock; lock = the machine lock at the run's start "
               "(under_lock: a sweep or benchmark of which this run is part held it)",
}


def machine_section(samples_path: Path, cores: int, lock: dict | None) -> dict:
    """summary.json `machine`: the machine over the run, from its samples (see METHODS['machine'])."""
    samples = read_jsonl(samples_path)
    section = {"cores": cores, "fingerprint": fingerprint(), "cpu_pressure_share": None, "steal_share": None,
               "load_mean": None, "load_max": None,
               "other_cpu_share": None, "alone": None, "lock": lock, "sampled_s": 0.0, "samples": len(samples)}
    if len(samples) < 2:
        return section
    first, last = samples[0], samples[-1]
    wall = last["t"] - first["t"]
    if wall <= 0:
        return section

    def delta(key: str) -> float:
        return last[key] - first[key]

    others = max(0.0, (delta("busy_s") - delta("run_cpu_s")) / (cores * wall))
    steal = delta("steal_s") / delta("all_s") if delta("all_s") > 0 else None
    loads = [s["load1"] for s in samples]
    lock_elsewhere = bool(lock and lock.get("holder") and not lock.get("under_lock"))
    section |= {
        "cpu_pressure_share": delta("psi_some_us") / 1e6 / wall if first["psi_some_us"] is not None else None,
        "steal_share": steal,
        "load_mean": statistics.fmean(loads),
        "load_max": max(loads),
        "other_cpu_share": others,
        "alone": others <= ALONE_OTHER_CPU_SHARE and (steal or 0.0) <= ALONE_STEAL_SHARE and not lock_elsewhere,
        "sampled_s": wall,
    }
    return section
