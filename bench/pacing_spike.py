"""The many-peers spike: can N peers on fewer cores keep the timing of a core each when their phases are paced
(job/pacing.py)? ResNet18, batch 32, one thread a peer, DDP over gloo on loopback.

Modes: `real` (no pacing: the truth where N fits the cores), `twin` (compute-free twin, compute a calibrated sleep)
and `padded` (real compute padded to k x its calibrated time). Per case: the step dilated back (step / k), each
slot's lateness and overrun share, CPU per peer per step, and RSS per peer.

    python -m bench.pacing_spike grid FOLDER        # the declared grid (docs/lab-log.md, 2026-12-07), 2 repeats
    python -m bench.pacing_spike device FOLDER      # where cores allow: N=8 a core each (the truth) against 2 cores
    python -m bench.pacing_spike hivemind RUN_DIR     # a hivemind run's background CPU and RSS per peer
    python -m bench.pacing_spike calibrate OUT.json
    python -m bench.pacing_spike case N MODE K CALIBRATION.json STEPS OUT.json
"""
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import psutil
import torch
import torch.distributed as dist
from torch import nn

from bench.payload import ComputeFreeTwin
from job.model import resnet18
from job.pacing import Calibration, Pacer, Recorder, SlotLog
from metrics.recording.rundir import RunDir
from metrics.recording.steplog import PHASES

BATCH, CLASSES, CHANNELS, WARMUP, STEPS = 32, 10, 3, 3, 8
GRID = ((2, "real", 1), (2, "twin", 1), (2, "padded", 2), (8, "twin", 1), (8, "twin", 2), (8, "padded", 4),
        (8, "padded", 6), (8, "padded", 8))  # (peers, mode, k), in this order in every repeat
TIMEOUT = timedelta(seconds=120)  # every collective's deadline


def batch(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(rank)
    return (torch.randn(BATCH, CHANNELS, 32, 32, generator=generator),
            torch.randint(0, CLASSES, (BATCH,), generator=generator))


def calibrate(out: Path, steps: int = 14) -> None:
    """One process on one core, alone: the phases' medians."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, (x, y) = resnet18(CLASSES, CHANNELS), batch(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    recorder, criterion = Recorder(model.parameters()), nn.CrossEntropyLoss()
    for _ in range(steps):
        recorder.mark("data")
        inputs, labels = x.clone(), y.clone()
        recorder.mark("forward")
        optimizer.zero_grad()
        loss = criterion(model(inputs), labels)
        recorder.mark("backward")
        loss.backward()
        recorder.mark("opt")
        optimizer.step()
        recorder.mark("end")
    recorder.calibration().save(out)


def worker(rank: int, world: int, port: int, mode: str, k: float, calibration: Path, steps: int, out: Path,
           cores: set[int] | None) -> None:
    if cores:
        os.sched_setaffinity(0, cores)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=TIMEOUT)
    torch.manual_seed(0)
    base = resnet18(CLASSES, CHANNELS)
    model = ComputeFreeTwin(base, CLASSES) if mode == "twin" else base
    ddp = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(base.parameters(), lr=0.01, momentum=0.9)
    pacer = Pacer(Calibration.load(calibration), k, base.parameters()) if mode != "real" else None
    criterion, (x, y) = nn.CrossEntropyLoss(), batch(rank)
    records = []

    def mark(phase: str) -> None:
        if pacer:
            getattr(pacer, phase)()

    for step in range(WARMUP + steps):
        if step == WARMUP and pacer:
            pacer.log = SlotLog()  # count the measured steps only
        start, cpu = time.perf_counter(), time.process_time()
        mark("data")
        inputs, labels = x.clone(), y.clone()
        mark("forward")
        optimizer.zero_grad()
        loss = criterion(ddp(inputs), labels)
        mark("backward")
        loss.backward()
        mark("opt")
        if mode != "twin":  # the twin's update is a sleep: its parameters' values do not matter to the timing
            optimizer.step()
        mark("end")
        records.append({"step_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu})
    dist.barrier()
    memory = psutil.Process().memory_full_info()
    measured = records[WARMUP:]
    out.write_text(json.dumps({
        "rank": rank, "step_s": statistics.median(r["step_s"] for r in measured),
        "cpu_per_step_s": statistics.fmean(r["cpu_s"] for r in measured),
        "rss_mib": memory.rss / 2**20, "pss_mib": memory.pss / 2**20,
        "slots": pacer.log.summary() if pacer else None}))
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def case(peers: int, mode: str, k: float, calibration: Path, steps: int, folder: Path,
         cores: list[set[int]] | None = None) -> dict[str, object]:
    """One case: `peers` worker processes (rank r on cores[r]; None: on this process's cores), their records
    gathered; the step dilated back is the slowest rank's / k."""
    folder.mkdir(parents=True, exist_ok=True)
    port, started = free_port(), time.perf_counter()
    processes = [subprocess.Popen([sys.executable, "-m", "bench.pacing_spike", "worker", str(rank), str(peers),
                                   str(port), mode, str(k), str(calibration), str(steps), str(folder / f"{rank}.json"),
                                   ",".join(map(str, sorted(cores[rank]))) if cores else ""])
                 for rank in range(peers)]
    codes = [p.wait(timeout=1800) for p in processes]
    if any(codes):
        raise RuntimeError(f"{mode} N={peers} k={k}: ranks exited {codes}")
    ranks = [json.loads((folder / f"{rank}.json").read_text()) for rank in range(peers)]
    slots = [r["slots"] for r in ranks if r["slots"]]
    return {
        "peers": peers, "mode": mode, "k": k, "steps": steps, "wall_s": time.perf_counter() - started,
        "step_s": max(r["step_s"] for r in ranks), "step_dilated_back_s": max(r["step_s"] for r in ranks) / k,
        "cpu_per_peer_step_s": statistics.fmean(r["cpu_per_step_s"] for r in ranks),
        "cores": len(set().union(*cores) if cores else os.sched_getaffinity(0)),
        "cpu_share_of_cores": sum(r["cpu_per_step_s"] for r in ranks) / max(r["step_s"] for r in ranks)
        / len(set().union(*cores) if cores else os.sched_getaffinity(0)),
        "rss_mib_per_peer": statistics.fmean(r["rss_mib"] for r in ranks),
        "pss_mib_per_peer": statistics.fmean(r["pss_mib"] for r in ranks),
        "overrun_share": max((s["overrun_share"] for s in slots), default=None),
        "late_p50_s": max((s["late_p50_s"] for s in slots), default=None),
        "late_p99_s": max((s["late_p99_s"] for s in slots), default=None),
        "late_max_s": max((s["late_max_s"] for s in slots), default=None),
        "late_share_of_step": max((s["late_total_s"] / steps / (max(r["step_s"] for r in ranks)) for s in slots),
                                  default=None),  # the worst rank's slot lateness per step / the step
    }


Plan = list[tuple[int, str, float, list[set[int]] | None]]  # (peers, mode, k, each rank's cores)


def device_plan(available: set[int], peers: int = 8) -> Plan:
    """The truth and its emulations on one machine: `peers` ranks undilated, a core each, against twin (k=1, 2) and
    padded (k=6) on 2 shared cores. Needs peers + 2 cores (the calibration pins the lowest)."""
    if len(available) < peers + 2:
        raise SystemExit(f"device: {peers} peers a core each beside 2 shared cores need {peers + 2} cores; this machine "
                         f"has {len(available)} (run it on a lent device machine: docs/usage.md)")
    low = sorted(available)
    shared, own = set(low[:2]), [{core} for core in low[2:2 + peers]]
    return [(peers, "real", 1, own), (peers, "twin", 1, [shared] * peers), (peers, "twin", 2, [shared] * peers),
            (peers, "padded", 6, [shared] * peers)]


def run_plan(folder: Path, plan: Plan, repeats: int = 2) -> None:
    """The plan's cases, a calibration before each repeat; every case's record appended to FOLDER/cases.jsonl."""
    folder.mkdir(parents=True, exist_ok=True)
    for repeat in range(repeats):
        calibration = folder / f"calibration-{repeat}.json"
        subprocess.run([sys.executable, "-m", "bench.pacing_spike", "calibrate", str(calibration)], check=True,
                       timeout=600)  # its own process: the pinning to one core stays there
        for peers, mode, k, cores in plan:
            record = case(peers, mode, k, calibration, STEPS, folder / f"r{repeat}-{mode}-n{peers}-k{k}", cores)
            with open(folder / "cases.jsonl", "a") as out:
                out.write(json.dumps(record | {"repeat": repeat}) + "\n")
            print(json.dumps(record | {"repeat": repeat}), flush=True)


def hivemind_background(run: Path) -> dict[str, object]:
    """Per peer of a finished run: the CPU of its process tree (resources.jsonl, the middle half of its samples, where
    it trains) beyond its training thread's compute (steps.jsonl: compute_s over the step), in cores; and its RSS."""
    peers = []
    for peer in RunDir(run).peers():
        samples = [json.loads(line) for line in peer.resources.read_text().splitlines()]
        middle = samples[len(samples) // 4: 3 * len(samples) // 4]
        steps = [json.loads(line) for line in peer.steps.read_text().splitlines()][2:]
        tree_cores = statistics.median(s["cpu_percent"] for s in middle) / 100
        compute_cores = sum(s["compute_s"] for s in steps) / sum(s.get(phase, 0.0) for s in steps for phase in PHASES)
        peers.append({"rank": peer.rank, "tree_cores": tree_cores, "compute_cores": compute_cores,
                      "background_cores": tree_cores - compute_cores,
                      "peak_rss_mib": max(s["rss_bytes"] for s in samples) / 2**20,
                      "compute_s_per_step": statistics.median(s["compute_s"] for s in steps)})
    return {"run": str(run), "peers": peers}


def main(argv: list[str]) -> None:
    command, *args = argv
    if command == "grid":
        run_plan(Path(args[0]), [(peers, mode, k, None) for peers, mode, k in GRID])
    elif command == "device":
        run_plan(Path(args[0]), device_plan(os.sched_getaffinity(0)))
    elif command == "hivemind":
        print(json.dumps(hivemind_background(Path(args[0])), indent=1))
    elif command == "calibrate":
        calibrate(Path(args[0]))
    elif command == "worker":
        rank, world, port, mode, k, calibration, steps, out, cores = args
        worker(int(rank), int(world), int(port), mode, float(k), Path(calibration), int(steps), Path(out),
               {int(c) for c in cores.split(",")} if cores else None)
    elif command == "case":
        peers, mode, k, calibration, steps, out = args
        result = case(int(peers), mode, float(k), Path(calibration), int(steps), Path(out).with_suffix(""))
        Path(out).write_text(json.dumps(result, indent=1))
        print(json.dumps(result))
    else:
        raise SystemExit(f"unknown command {command!r}: calibrate, worker or case")


if __name__ == "__main__":
    main(sys.argv[1:])
