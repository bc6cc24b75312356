#!/usr/bin/env python
"""Which rate should the default emulated link have (conf/network/auto.yaml)? Measured on this machine as
docs/emulation.md says; the result replaces bench/results/link_rate.json (--out: another folder).
"""
import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.goodput import probe as goodput_probe  # noqa: E402
from bench.jobs import train  # noqa: E402
from bench.results import recorded, save  # noqa: E402
from bench.run import run_script, script_parser  # noqa: E402
from launchers.lock import status as lock_status  # noqa: E402
from metrics.recording.jsonl import read_jsonl  # noqa: E402
from metrics.recording.rundir import RunDir  # noqa: E402
from metrics.recording.steplog import PHASES  # noqa: E402
from metrics.summary.link import direction_name, goodput_mbit  # noqa: E402
from metrics.summary.schema import Summary  # noqa: E402
from netemu.fabric import Fabric  # noqa: E402

EMULATED_MTU = yaml.safe_load((ROOT / "conf" / "network" / "emulated.yaml").read_text())["mtu"]  # the runs' frames
JOB = ["model=resnet18", "data=digits", "eval_every=0"]
CONTROL_ARM = yaml.safe_load((ROOT / "conf" / "config.yaml").read_text())["report"]["control"]


class Headline(NamedTuple):
    """The headline sweep as typed (its default plan), whose wall time the rows estimate."""
    strategies: tuple[str, ...] = ("ring", "stepwise", "ps")
    baselines: tuple[tuple[str, int], ...] = (("single", 2), ("single", 1))
    control: tuple[str, ...] = ("single_2",) if CONTROL_ARM else ()  # the equal-resource baseline again in each block
    steps: int = 100
    eval_every: int = 5
    repeats: int = 3


HEADLINE = Headline()
TRAIN = ("import sys, torch\nsys.path.insert(0, sys.argv[1])\nfrom job.model import resnet18\n"
         "torch.set_num_threads(1); torch.manual_seed(0)\nmodel = resnet18(10, 1)\n"
         "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
         "x, y = torch.randn(32, 1, 32, 32), torch.randint(0, 10, (32,))\nfirst = True\nwhile True:\n"
         "    opt.zero_grad(); torch.nn.functional.cross_entropy(model(x), y).backward(); opt.step()\n"
         "    if first: print('ready', flush=True); first = False")


# --- what else runs on this machine ----------------------------------------------------------------
def others(window_s: float = 1.0, floor: float = 10.0) -> list[str]:
    """Processes outside this benchmark's tree that used over `floor` % of a core during `window_s`."""
    import psutil

    mine = {os.getpid(), *(p.pid for p in psutil.Process().children(recursive=True))}
    procs = [p for p in psutil.process_iter(["pid", "name", "cmdline"]) if p.pid not in mine]
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.cpu_percent(None)
    time.sleep(window_s)
    busy = []
    for proc in procs:
        try:
            percent = proc.cpu_percent(None)
        except psutil.Error:
            continue
        if percent > floor:
            words = [Path(w).name if w.startswith("/") else w for w in proc.info["cmdline"] or [proc.info["name"]]]
            busy.append(f"{percent:.0f}% pid {proc.pid} {' '.join(words)[:120]}")
    return busy


def machine_state() -> dict[str, Any]:
    return {"at": time.strftime("%Y-%m-%d %H:%M:%S"), "load_average": list(os.getloadavg()), "others": others(),
            "machine_lock": lock_status("off")}


# --- probe: a bulk flow each way, with and without training beside it -----------------------------
def training_loads(fabric: Fabric) -> list[subprocess.Popen[str]]:
    """ResNet18 training on every host, once each has done its first step (the CPUs busy from then on)."""
    loads = [subprocess.Popen([*host.enter, sys.executable, "-c", TRAIN, str(ROOT)], stdout=subprocess.PIPE,
                              text=True, stdin=subprocess.DEVNULL) for host in fabric.hosts]
    for load in loads:
        if load.stdout is None or load.stdout.readline().strip() != "ready":
            raise RuntimeError("the training load did not start")
    return loads


def probe(rate: float, seconds: float, busy: bool, tmp: Path) -> dict[str, Any]:
    """A bulk TCP flow each way at `rate`, the hosts training (busy) or not: per direction, what its token bucket
    sent / the span as a share of `rate`, and the goodput while queued (none kept: the senders lacked CPU)."""
    meter_path = tmp / f"probe-{rate:g}-{busy}.json"
    goodput_probe(2, rate, seconds, meter_path, beside=training_loads if busy else None, mtu=EMULATED_MTU)
    metered = json.loads(meter_path.read_text())
    carried = {direction_name(d): d["carried_bytes"] * 8 / metered["span_s"] / 1e6 / rate for d in metered["directions"]}
    queued = {direction_name(d): None if (mbit := goodput_mbit(d)) is None else mbit / rate
              for d in metered["directions"]}
    return {"worst_carried_share": min(carried.values()), "carried_share_by_direction": carried,
            "goodput_share_while_queued_by_direction": queued,
            "busy_s_by_direction": {direction_name(d): d["busy_s"] for d in metered["directions"]},
            "span_s": metered["span_s"]}


# --- runs: the strategies at a rate ------------------------------------------------------------------
def steady_breakdown(run: RunDir) -> dict[str, float]:
    """Mean seconds per step of each phase over all workers' steps after their first (connection set-up)."""
    steps = [s for peer in run.peers() for s in read_jsonl(peer.steps)[1:]]
    return {phase: statistics.fmean(s.get(phase, 0.0) for s in steps) for phase in PHASES}


def measure_run(what: str, overrides: list[str], steps: int) -> dict[str, Any]:
    print(f"{what} ...", file=sys.stderr, flush=True)
    started = time.monotonic()
    with train(*overrides, *JOB, f"max_steps={steps}") as run_dir:
        run = RunDir(run_dir)
        summary = Summary.load(run.summary)
        breakdown = steady_breakdown(run)
    step_s = sum(breakdown.values())
    evaluation = summary.evaluation
    evaluations = max(evaluation.evaluations or 1, 1)
    train_s = max(p.train_s for p in summary.peers if p.steps and p.train_s is not None)
    link = summary.link
    return {"comm_share": breakdown["comm_s"] / step_s, "step_s": step_s, "breakdown_s": breakdown,
            "link": {"kind": link.kind, "nominal_mbit": link.nominal_mbit, "goodput_mbit": link.goodput_mbit,
                     "goodput_share": link.goodput_share, "busy_s": link.busy_s,
                     "worst_direction": link.worst_direction, "faithful": link.faithful, "reason": link.reason},
            "cpu_faithful": summary.isolation.faithful,
            "cpu_unfaithful": summary.isolation.unfaithful,
            "wall_s": summary.wall_s, "train_s": train_s, "benchmark_wall_s": time.monotonic() - started,
            "other_cpu_share": summary.machine.other_cpu_share,  # CPU that others used beside the run
            "fixed_s": summary.wall_s - train_s - (evaluation.after_training_s or 0),
            "eval_s": (evaluation.after_training_s or 0) / evaluations,
            "snapshot_s": (evaluation.snapshot_pause_s or 0) / evaluations}


def headline_run_s(run: dict[str, Any]) -> float:
    """A headline run's wall time, estimated from a shorter run's figures."""
    evaluations = HEADLINE.steps // HEADLINE.eval_every + 1
    return run["fixed_s"] + HEADLINE.steps * run["step_s"] + evaluations * (run["eval_s"] + run["snapshot_s"])


def headline_s(runs: dict[str, dict[str, Any]], baselines: dict[str, dict[str, Any]]) -> float | None:
    if any(name not in runs for name in HEADLINE.strategies):
        return None
    block = [runs[n] for n in HEADLINE.strategies] + [*baselines.values()] + [baselines[n] for n in HEADLINE.control]
    return HEADLINE.repeats * sum(map(headline_run_s, block))


def judged(row: dict[str, Any], goodput_share: float, comm_share: float) -> dict[str, Any]:
    """The rate's row with the rule's inputs (heaviest strategy, its comm share, faithful runs) and its fit."""
    heaviest = max(row["runs"], key=lambda n: row["runs"][n]["comm_share"]) if row["runs"] else None
    busy_share = row["probe_busy"]["worst_carried_share"]
    row |= {"heaviest": heaviest,
            "heaviest_comm_share": row["runs"][heaviest]["comm_share"] if heaviest else None,
            "runs_faithful": all(r["link"]["faithful"] is not False and r["cpu_faithful"] is not False
                                 for r in row["runs"].values())}
    row["fits"] = bool(busy_share is not None and busy_share >= goodput_share and row["runs_faithful"]
                       and heaviest and row["heaviest_comm_share"] >= comm_share)
    return row


def choose(rows: list[dict[str, Any]], goodput_share: float, comm_share: float) -> dict[str, Any]:
    rate = max((r["rate_mbit"] for r in rows if r["fits"]), default=None)
    return {"rate_mbit": rate, "rule": f"the highest rate whose busy probe carried >= {goodput_share:.0%} of it, "
                                       f"whose runs' links and CPUs were faithful, and where the heaviest strategy "
                                       f"communicates >= {comm_share:.0%} of its step"}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(f"/tmp/avgbench-link-rate-{os.getpid()}")
    tmp.mkdir(exist_ok=True)
    rows: list[dict[str, Any]] = []
    for rate in args.rates:
        print(f"rate {rate:g} Mbit/s: probes ...", file=sys.stderr, flush=True)
        row: dict[str, Any] = {"rate_mbit": rate, "probe_idle": probe(rate, args.probe_s, False, tmp),
                               "probe_busy": probe(rate, args.probe_s, True, tmp), "runs": {}}
        for name in args.strategies:
            row["runs"][name] = measure_run(f"rate {rate:g} Mbit/s: {name}", [
                f"strategy={name}", "peers=2", "network=emulated", f"network.bandwidth_mbit={rate}"], args.steps)
        rows.append(judged(row, args.goodput_share, args.comm_share))
        print(summary_line(row), file=sys.stderr, flush=True)
    baselines = {} if args.no_headline else {
        f"{name}_{peers}": measure_run(f"baseline {name} peers={peers}", [f"strategy={name}", f"peers={peers}"],
                                       args.steps) for name, peers in HEADLINE.baselines}
    loopback = {name: measure_run(f"loopback {name}", [f"strategy={name}", "peers=2", "network=loopback"], args.steps)
                for name in HEADLINE.strategies if args.loopback and not args.no_headline}
    for row in rows:
        row["headline_estimate_s"] = headline_s(row["runs"], baselines) if baselines else None
    return {"rows": rows, "baselines": baselines, "loopback": loopback,
            "loopback_headline_estimate_s": headline_s(loopback, baselines) if loopback else None}


def summary_line(row: dict[str, Any]) -> str:
    idle, busy = row["probe_idle"]["worst_carried_share"], row["probe_busy"]["worst_carried_share"]
    comm = ", ".join(f"{n} {r['comm_share']:.0%} (step {r['step_s']:.2f} s, link "
                     f"{'n/a' if r['link']['goodput_share'] is None else format(r['link']['goodput_share'], '.0%')}"
                     f"{'' if r['cpu_faithful'] is not False else ', CPU unfaithful'})"
                     for n, r in row["runs"].items())
    return (f"{row['rate_mbit']:>6g} Mbit/s  carried idle {fmt(idle)} busy {fmt(busy)}  comm share: {comm}  "
            f"fits: {row['fits']}")


def fmt(share: float | None) -> str:
    return "n/a" if share is None else f"{share:.1%}"


def run(args: argparse.Namespace) -> None:
    before = machine_state()
    started = time.monotonic()
    figures = measure(args)
    elapsed = time.monotonic() - started
    after = machine_state()
    choice = choose(figures["rows"], args.goodput_share, args.comm_share)
    result = {"name": "link_rate", "ratio": None, "goal": f"busy goodput >= {args.goodput_share:.0%} of the rate, "
                                                          f"heaviest comm share >= {args.comm_share:.0%}",
              "setup": f"rates {args.rates} Mbit/s, strategies {args.strategies} at peers=2, {' '.join(JOB)} "
                       f"max_steps={args.steps}, probes {args.probe_s:g} s each way",
              "choice": choice, **figures, "benchmark_s": elapsed, "before": before, "after": after}
    if chosen := next((r for r in figures["rows"] if r["rate_mbit"] == choice["rate_mbit"]), None):
        result["ratio"] = chosen["probe_busy"]["worst_carried_share"]
    print("\n".join(summary_line(r) for r in figures["rows"]))
    for row in figures["rows"]:
        estimate = row["headline_estimate_s"]
        print(f"{row['rate_mbit']:>6g} Mbit/s  headline estimate {'n/a' if estimate is None else f'{estimate / 60:.0f} min'}")
    if figures["loopback_headline_estimate_s"]:
        print(f"  loopback  headline estimate {figures['loopback_headline_estimate_s'] / 60:.0f} min")
    print(f"choice: {choice['rate_mbit']} Mbit/s ({choice['rule']}); benchmark took {elapsed / 60:.1f} min; "
          f"load average before {before['load_average'][0]:.2f}, after {after['load_average'][0]:.2f}")
    if not args.no_save:
        print(f"saved {save(recorded(result), args.out)}")


def main() -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--rates", type=lambda t: [float(v) for v in t.split(",")], default=[150, 200, 300, 400],
                        help="candidate rates, Mbit/s per host and direction (default: 150,200,300,400)")
    parser.add_argument("--strategies", type=lambda t: t.split(","), default=list(HEADLINE.strategies),
                        help="strategies run at each rate (default: the headline's ring,stepwise,ps)")
    parser.add_argument("--steps", type=int, default=5, help="steps per run (default 5; the first is left out)")
    parser.add_argument("--probe-s", type=float, default=6.0, help="seconds of each probe's flows (default 6)")
    parser.add_argument("--goodput-share", type=float, default=0.95, help="least busy goodput / rate (0.95)")
    parser.add_argument("--comm-share", type=float, default=0.5, help="least comm share of the heaviest (0.5)")
    parser.add_argument("--no-headline", action="store_true", help="skip the baselines and the headline estimate")
    parser.add_argument("--loopback", action=argparse.BooleanOptionalAction, default=True,
                        help="also run the headline's strategies on loopback, for today's estimate (default on)")
    return run_script(parser, run, least={"steps": 2})


if __name__ == "__main__":
    sys.exit(main())
