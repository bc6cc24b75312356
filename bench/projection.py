"""Cost-model validation: predicted / measured step time - 1, per strategy, peer count and link rate.

For each link rate and averaging strategy of conf/strategy/ (allreduce = DDP over gloo, ring =
Horovod with the MPI controller; not hivemind, whose rounds wait for matchmaking), `steps` steps of the payload model (model=mlp, its width set per rate so
that S/beta is 0.3-0.4 s) run at N = 2, 4, 8, every process on its own emulated host
(network=emulated, tc tbf links). The N=2 run calibrates: metrics.project.measure takes its
compute per step and S (its payload through the strategy's payload relation), not its
communication time. beta is measured, as a user would on a real link: two emulated hosts
(netemu.Fabric, same rate) each sending one TCP stream to the other at once for `probe_s`
seconds; beta = the mean of the receivers' bytes / (last - first byte time) (below the
token-bucket rate by the TCP and IP headers, about 7 %). Predicted: the strategy's cost model
(Strategy.step_time) at the case's N, that beta, alpha = 0 (no netem here). Measured: the case
run's mean step (steps 2..last, longest worker, evaluations excluded). error = predicted /
measured - 1. The same probe with N hosts, each sending to the next at once, tells whether
this machine can emulate N links of that rate: a case is link-bound when each of the N
streams got at least LINK_BOUND of the rate; elsewhere the CPU, not the link, sets the pace
and the case tests the machine, not the model. Medians are given over all cases and over the
link-bound ones.
"""
import statistics
import subprocess
import sys
import time

from bench.jobs import averaging_strategies, train
from metrics.project import Link, measure

STRATEGIES = averaging_strategies(tweaks={"ring": ["ring.controller=mpi"]}, skip={
    "hivemind": "its rounds wait for matchmaking (hivemind.matchmaking_time), not for the link"})
WIDTHS = {20: 320, 100: 864, 1000: 1728}  # S = 0.75, 3.9, 13.8 MB (float32 gradients of model=mlp)
LINK_BOUND = 0.85  # share of the rate each of N concurrent probe streams must get for a case to test the link
PROBE_PORT = 5001
PROBE_SEND = ("import socket, sys, time\nend = time.monotonic() + 30\nwhile True:\n"
              "    try:\n        s = socket.create_connection((sys.argv[1], %d)); break\n"
              "    except OSError:\n        assert time.monotonic() < end; time.sleep(0.1)\n"
              "block = bytes(1 << 16); end = time.monotonic() + float(sys.argv[2])\n"
              "while time.monotonic() < end: s.sendall(block)\n" % PROBE_PORT)
PROBE_RECEIVE = ("import socket, time\ns = socket.socket(); s.bind(('0.0.0.0', %d)); s.listen(); c, _ = s.accept()\n"
                 "n, first = 0, None\nwhile (d := c.recv(1 << 16)):\n"
                 "    first = first or time.perf_counter(); n += len(d); last = time.perf_counter()\n"
                 "print(n / (last - first))\n" % PROBE_PORT)


def probe(hosts: int, mbit: float, seconds: float) -> list[float]:
    """Goodput in Mbit/s of `hosts` TCP streams at once, host i sending to host i+1 (mod hosts)."""
    from netemu import Fabric

    started = []
    with Fabric(hosts, [mbit] * hosts) as fabric:
        try:
            receivers = [subprocess.Popen([*h.enter, sys.executable, "-c", PROBE_RECEIVE], stdout=subprocess.PIPE,
                                          text=True) for h in fabric.hosts]
            started += receivers
            started += [subprocess.Popen([*h.enter, sys.executable, "-c", PROBE_SEND,
                                          fabric.hosts[(h.index + 1) % hosts].addr, str(seconds)])
                        for h in fabric.hosts]
            rates = [float(r.communicate(timeout=seconds + 60)[0]) * 8 / 1e6 for r in receivers]
        finally:
            for proc in started:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
    return rates


def error(predicted: float, measured: float) -> float:
    return predicted / measured - 1


def medians(rows: list[dict]) -> dict:
    """Median |error| over the rows and per strategy; the share of rows within 15 %."""
    if not rows:
        return {}
    by_strategy = {s: statistics.median(abs(r["error"]) for r in rows if r["strategy"] == s)
                   for s in dict.fromkeys(r["strategy"] for r in rows)}
    return {"median_abs_error": statistics.median(abs(r["error"]) for r in rows),
            "median_abs_error_by_strategy": by_strategy,
            "within_15_percent": sum(abs(r["error"]) <= 0.15 for r in rows) / len(rows), "cases": len(rows)}


def summarize(rows: list[dict]) -> dict:
    return medians(rows) | {"link_bound_cases": medians([r for r in rows if r["link_bound"]])}


def run_case(strategy: str, peers: int, rate: int, steps: int):
    with train(*STRATEGIES[strategy], f"peers={peers}", "network=emulated", f"network.bandwidth_mbit={rate}",
               "model=mlp", f"model.width={WIDTHS[rate]}", f"max_steps={steps}", "eval_every=0") as run_dir:
        return measure(run_dir)


def run(rates=(20, 100, 1000), peers=(2, 4, 8), steps: int = 10, probe_s: float = 3.0) -> dict:
    rows = []
    for rate in rates:
        probes = {n: probe(n, rate, probe_s) for n in {2, *peers}}
        beta = Link("probe", statistics.fmean(probes[2]), 0.0, "probe goodput, 2 hosts")
        for strategy in STRATEGIES:
            calibration = None
            for n in peers:
                print(f"  {strategy} N={n} {rate} Mbit/s ...", file=sys.stderr, flush=True)
                case = run_case(strategy, n, rate, steps)
                calibration = calibration or case
                link = beta
                predicted = calibration.step_s(n, link)
                rows.append({
                    "strategy": strategy, "peers": n, "link_mbit": rate, "width": WIDTHS[rate],
                    "beta_mbit": link.mbit, "beta_source": link.source,
                    "compute_s": calibration.compute_s, "size_bytes": calibration.size_bytes,
                    "predicted_step_s": predicted, "measured_step_s": case.measured_step_s,
                    "error": error(predicted, case.measured_step_s),
                    "probe_mbit_per_stream": statistics.fmean(probes[n]), "probe_streams": n,
                    "link_bound": min(probes[n]) >= LINK_BOUND * rate,
                })
    figures = summarize(rows)
    return {
        "name": "projection_validation",
        "ratio": figures["median_abs_error"],
        "goal": "|error| <= 0.15 (ps, stepwise, allreduce, ring)",
        **figures,
        "rows": rows,
        "setup": f"model=mlp width {WIDTHS} by rate, {steps} steps, N={list(peers)}, links {list(rates)} Mbit/s, "
                 f"calibration: the N=2 run at the same rate; {time.strftime('%Y-%m-%d')}",
        "method": __doc__.strip(),
    }
