"""Cost-model validation: predicted / measured step time - 1, per strategy, peer count and link rate,
calibrated on N = 2 and validated on peer counts the models were not fitted to.

    python bench/run.py projection                      # the full grid (below)
    AVGBENCH_PROJECTION="rates=20 peers=2,4,8 strategies=ps,stepwise" python bench/run.py projection

For each link rate and strategy (every synchronous averaging strategy of the registry,
Strategy.synchronous, with ring on Horovod's MPI controller; the others, hivemind, where asked for),
with what each declares a benchmark's few steps need (Strategy.benchmark_overrides), `steps` steps
of the payload model (model=mlp, its width set per rate so that S/beta is 0.3-0.4 s) run at each N,
every process on its own emulated
host (network=emulated, tc tbf links). The N=2 run is the calibration case: metrics.project.measure
takes its compute per step, hidden communication, server update and S (its payload through the
strategy's payload relation) and fits the strategy's overlap share where it has one (ps), not its
communication time. Every other N is a held-out case: predicted from the N=2 run alone. beta is
measured, as a user would on a real link: two emulated hosts (netemu.Fabric, same rate) each
sending one TCP stream to the other at once for `probe_s` seconds; beta = the mean of the
receivers' bytes / (last - first byte time) (below the token-bucket rate by the TCP and IP headers,
about 7 %). Predicted: the strategy's cost model (Strategy.step_time) at the case's N, that beta,
alpha = 0 (no netem here). Measured: the case run's period (mean over workers of each worker's
mean step over steps 2..last, evaluations excluded). error = predicted / measured - 1. The same
probe with N hosts, each sending to the next at once, decides before the case runs whether this
machine can emulate N links of that rate: a case is counted when each of the N streams got at least
LINK_BOUND of the rate, else it is not counted (the CPU, not the link, would set the pace) and not
run (the N=2 case still runs: it calibrates the others). Figures: every case's error, and the
worst and median |error|, for held-out counted cases apart from calibration cases; a case is
counted or not, never both.
"""
import statistics
import subprocess
import sys
import time

from bench.jobs import averaging_strategies, grid_settings, ints, synchronous_strategies, train
from metrics.project import Link, measure

STRATEGIES = averaging_strategies(tweaks={
    "ring": ["ring.controller=mpi"],
    "hivemind": ["hivemind.matchmaking_time=2", "hivemind.request_timeout=1", "hivemind.target_batch_size=256"]})
SYNCHRONOUS = synchronous_strategies()
GOALS = {"synchronous": 0.15, "median": 0.07, "asynchronous": 0.25}  # |error| of held-out counted cases
DEFAULT_GRID = f"rates=20,100 peers=2,4,8,16 strategies={','.join(SYNCHRONOUS)} steps=10"
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


def figures(rows: list[dict]) -> dict:
    """Worst and median |error| over the rows and per strategy; the share within 15 %."""
    if not rows:
        return {"cases": 0}

    def stats(errors: list[float]) -> dict:
        worst = max(errors, key=abs)
        return {"cases": len(errors), "median_abs_error": statistics.median(abs(e) for e in errors),
                "worst_error": worst, "within_15_percent": sum(abs(e) <= 0.15 for e in errors) / len(errors)}

    by_strategy = {s: stats([r["error"] for r in rows if r["strategy"] == s])
                   for s in dict.fromkeys(r["strategy"] for r in rows)}
    return stats([r["error"] for r in rows]) | {"by_strategy": by_strategy}


def summarize(rows: list[dict]) -> dict:
    """Held-out counted cases (what the goals judge), calibration cases apart, and the cases not counted."""
    held_out = [r for r in rows if r["role"] == "held-out" and r["counted"]]
    synchronous = [r for r in held_out if r["strategy"] in SYNCHRONOUS]
    asynchronous = [r for r in held_out if r["strategy"] not in SYNCHRONOUS]
    goals_met = {
        "every synchronous held-out case within 15 %": all(abs(r["error"]) <= GOALS["synchronous"]
                                                           for r in synchronous),
        "median synchronous held-out |error| <= 7 %": bool(synchronous) and statistics.median(
            abs(r["error"]) for r in synchronous) <= GOALS["median"],
    }
    if asynchronous:
        goals_met["every asynchronous held-out case within 25 %"] = all(abs(r["error"]) <= GOALS["asynchronous"]
                                                                        for r in asynchronous)
    return {"held_out": figures(held_out), "calibration": figures([r for r in rows if r["role"] == "calibration"]),
            "not_counted": [{k: r[k] for k in ("strategy", "peers", "link_mbit", "probe_mbit_per_stream")}
                            for r in rows if not r["counted"]],
            "goals_met": goals_met}


def run_case(strategy: str, peers: int, rate: int, steps: int, beta: Link):
    with train(*STRATEGIES[strategy], f"peers={peers}", "network=emulated", f"network.bandwidth_mbit={rate}",
               "model=mlp", f"model.width={WIDTHS[rate]}", f"max_steps={steps}", "eval_every=0") as run_dir:
        return measure(run_dir, fit_link=beta)


def grid(text: str | None = None) -> dict:
    """`rates=20,100 peers=2,4,8,16 strategies=ps,ring steps=10` (DEFAULT_GRID where a key is missing)."""
    settings = grid_settings(DEFAULT_GRID, "AVGBENCH_PROJECTION", text)
    return {"rates": ints(settings["rates"]), "peers": sorted({2, *ints(settings["peers"])}),
            "strategies": settings["strategies"].split(","), "steps": int(settings["steps"])}


def run(text: str | None = None, probe_s: float = 3.0) -> dict:
    chosen = grid(text)
    rows = []
    for rate in chosen["rates"]:
        probes = {n: probe(n, rate, probe_s) for n in chosen["peers"]}
        beta = Link("probe", statistics.fmean(probes[2]), 0.0, "probe goodput, 2 hosts")
        counted = {n: min(probes[n]) >= LINK_BOUND * rate for n in chosen["peers"]}
        for strategy in chosen["strategies"]:
            calibration = None
            for n in chosen["peers"]:
                if not counted[n] and n != 2:
                    print(f"  {strategy} N={n} {rate} Mbit/s: not run ({min(probes[n]):.0f} Mbit/s per stream "
                          f"< {LINK_BOUND:.0%} of the rate)", file=sys.stderr, flush=True)
                    continue
                print(f"  {strategy} N={n} {rate} Mbit/s ...", file=sys.stderr, flush=True)
                case = run_case(strategy, n, rate, chosen["steps"], beta)
                calibration = calibration or case
                predicted = calibration.step_s(n, beta)
                rows.append({
                    "strategy": strategy, "peers": n, "link_mbit": rate, "width": WIDTHS[rate],
                    "role": "calibration" if n == 2 else "held-out", "counted": counted[n],
                    "beta_mbit": beta.mbit, "beta_source": beta.source,
                    "compute_s": calibration.compute_s, "hidden_s": calibration.hidden_s,
                    "server_s": calibration.server_s, "overlap": calibration.overlap,
                    "size_bytes": calibration.size_bytes,
                    "predicted_step_s": predicted, "measured_step_s": case.measured_step_s,
                    "error": error(predicted, case.measured_step_s),
                    "probe_mbit_per_stream": min(probes[n]), "probe_streams": n,
                })
    summary = summarize(rows)
    return {
        "name": "projection_validation",
        "ratio": summary["held_out"].get("median_abs_error"),
        "goal": f"held-out |error| <= 0.15 every synchronous case ({', '.join(SYNCHRONOUS)}), median <= 0.07; "
                f"asynchronous ({', '.join(sorted(set(STRATEGIES) - set(SYNCHRONOUS)))}) <= 0.25",
        **summary,
        "rows": rows,
        "setup": f"model=mlp width {WIDTHS} by rate, {chosen['steps']} steps, N={chosen['peers']}, links "
                 f"{chosen['rates']} Mbit/s, strategies {chosen['strategies']}; calibration: the N=2 run at the same "
                 f"rate; {time.strftime('%Y-%m-%d')}",
        "method": __doc__.strip(),
    }
