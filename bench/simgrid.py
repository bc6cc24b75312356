"""A second opinion on the cost models at N = 16-256: SimGrid's flow-level network simulation.

The cost models (Strategy.step_time) are alpha-beta formulas: a round's messages cost latency plus
bytes / rate, and concurrent flows on one link split it evenly by assumption. SimGrid (Casanova et
al.) computes the share of every concurrent flow itself, and its default network model (LV08,
Velho and Legrand 2009) adds what TCP does to it, validated against packet-level simulation:
each message's latency x 13.01 (slow start), bandwidth x 0.97 (headers), a window of
network/TCP-gamma bytes in flight (rate <= gamma / round-trip time), and acknowledgements
taking 5 % of the reverse direction (network/crosstraffic). The same message schedule runs twice:
under CM02 without cross traffic (max-min sharing only: where it differs from the formula, the
schedule's contention differs from what the formula assumes) and under LV08 (SimGrid's defaults:
where it differs from CM02, TCP's overheads do).

Platform: N hosts in a star, each behind its own full-duplex link of rate beta and one-way
latency alpha/2 (alpha between two hosts), the emulated cluster's shape (netemu/: one shaped
link per host). Schedules, per round (no compute, nothing hidden, no server update):
- ring all-reduce (allreduce, ring): 2(N-1) steps; in each, every host sends S/N bytes to its
  right neighbour and the step ends when all have arrived;
- ps, sync, one server: each worker in turn gets the server's ready notice (1 byte) and pushes S
  (the server receives one push at a time, as strategies/ps.py does), then the server replies S
  to every worker (all replies share its uplink).
Compared with each strategy's own step_time at the same N, S, beta and alpha, compute 0.
Needs SimGrid's Python bindings: Debian's python3-simgrid (PyPI has source releases only).
"""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEBIAN_PACKAGES = "/usr/lib/python3/dist-packages"
MODELS = {"max-min": ["--cfg=network/model:CM02", "--cfg=network/crosstraffic:0"],
          "tcp_warm": ["--cfg=network/model:LV08", "--cfg=network/latency-factor:1"],
          "tcp": ["--cfg=network/model:LV08"]}
SCHEDULES = ("ring_allreduce", "ps_sync")
# (name, Mbit/s, one-way ms): the network presets' rates (conf/network) with a latency typical of each
LINKS = (("home", 20, 10.0), ("wan", 100, 20.0), ("lan", 1000, 0.1))
PEERS = (16, 32, 64, 128, 256)


def import_simgrid():
    """SimGrid's bindings: installed in this interpreter, or Debian's python3-simgrid for the same Python."""
    try:
        import simgrid
    except ImportError:
        if not any(Path(DEBIAN_PACKAGES).glob(f"simgrid.cpython-{sys.version_info[0]}{sys.version_info[1]}*.so")):
            raise RuntimeError(
                "SimGrid's Python bindings are not installed: run `apt-get install python3-simgrid` (Debian; "
                f"scripts/setup.sh does). PyPI has only source releases of simgrid. Python {sys.version_info[0]}."
                f"{sys.version_info[1]} needs bindings built for it in {DEBIAN_PACKAGES}") from None
        sys.path.append(DEBIAN_PACKAGES)
        import simgrid
    return simgrid


def simulate(model: str, cases: list[dict]) -> list[float]:
    """Seconds of simulated time per round for each case (schedule, workers, size, mbit, latency_ms), under one
    SimGrid network model. SimGrid allows one engine per process: run this in a process of its own."""
    sg = import_simgrid()
    engine = sg.Engine(["avgbench", *MODELS[model], "--log=root.thresh:warning"])
    hosts_needed = max(c["workers"] for c in cases) + 1  # + the ps server
    zone = sg.NetZone.create_star_zone("cluster")
    hosts, links = [], []
    for i in range(hosts_needed):
        host = zone.create_host(f"host{i}", 1e9)
        link = zone.create_split_duplex_link(f"link{i}", 1e9)
        zone.add_route(host.netpoint, None, None, None, [sg.LinkInRoute(link, sg.LinkInRoute.Direction.UP)], True)
        hosts.append(host)
        links.append(link)
    zone.seal()
    seconds = []

    def ring_allreduce(n: int, size: float) -> None:
        for _ in range(2 * (n - 1)):
            sg.Comm.wait_all([sg.Comm.sendto_async(hosts[i], hosts[(i + 1) % n], int(size / n)) for i in range(n)])

    def ps_sync(n: int, size: float) -> None:
        server = hosts[n]
        for worker in hosts[:n]:
            sg.Comm.sendto(server, worker, 1)
            sg.Comm.sendto(worker, server, int(size))
        sg.Comm.wait_all([sg.Comm.sendto_async(server, worker, int(size)) for worker in hosts[:n]])

    def driver() -> None:
        for case in cases:
            for link in links:
                link.set_bandwidth(case["mbit"] * 1e6 / 8)
                link.set_latency(case["latency_ms"] / 1e3 / 2)
            started = sg.Engine.clock
            {"ring_allreduce": ring_allreduce, "ps_sync": ps_sync}[case["schedule"]](case["workers"], case["size"])
            seconds.append(sg.Engine.clock - started)

    sg.Actor.create("driver", hosts[0], driver)
    engine.run()
    return seconds


def simulate_apart(model: str, cases: list[dict]) -> list[float]:
    """simulate() in a fresh interpreter (one SimGrid engine per process)."""
    code = ("import json, sys; from bench.simgrid import simulate; "
            "print(json.dumps(simulate(sys.argv[1], json.loads(sys.stdin.read()))))")
    done = subprocess.run([sys.executable, "-c", code, model], input=json.dumps(cases), cwd=ROOT,
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"SimGrid ({model}) failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def formula_s(schedule: str, workers: int, size: float, mbit: float, latency_ms: float) -> float:
    """The strategy's own cost model for one round: allreduce's (flat all-reduce, DDP off) and sync ps's with one
    server, compute, server update and overlap 0."""
    from metrics.projection.cost import Cost
    from strategies.allreduce import AllReduce
    from strategies.ps import ParameterServer

    cost = Cost(workers=workers, size=size, rate=mbit * 1e6 / 8, latency=latency_ms / 1e3)
    if schedule == "ring_allreduce":
        return AllReduce.step_time(Cost(**{**cost.__dict__, "knobs": {"ddp": False}}))
    return ParameterServer.step_time(Cost(**{**cost.__dict__, "knobs": {"mode": "sync", "servers": 1}}))


def payloads() -> dict[str, int]:
    """S: float32 parameter bytes of the embedded job's ResNet18 and of the projection benchmark's widest MLP."""
    from job.model import MODELS

    return {name: 4 * sum(p.numel() for p in MODELS[name](10, 1, **options).parameters())
            for name, options in (("resnet18", {}), ("mlp", {"width": 1728}))}


def compare(peers=PEERS, links=LINKS, sizes: dict | None = None) -> list[dict]:
    sizes = sizes or payloads()
    cases = [{"schedule": schedule, "workers": n, "size": size, "payload": name, "link": link, "mbit": mbit,
              "latency_ms": ms}
             for schedule in SCHEDULES for name, size in sizes.items() for link, mbit, ms in links for n in peers]
    simulated = {model: simulate_apart(model, cases) for model in MODELS}
    rows = []
    for i, case in enumerate(cases):
        formula = formula_s(case["schedule"], case["workers"], case["size"], case["mbit"], case["latency_ms"])
        rows.append({**case, "formula_s": formula, **{f"{m}_s": simulated[m][i] for m in MODELS},
                     **{f"{m}_over_formula": simulated[m][i] / formula for m in MODELS}})
    return rows


def run(peers=PEERS) -> dict:
    rows = compare(peers)
    ratios = {m: [r[f"{m}_over_formula"] for r in rows] for m in MODELS}
    by = {f"{s} {m}": [min(v for r, v in zip(rows, ratios[m]) if r["schedule"] == s),
                       max(v for r, v in zip(rows, ratios[m]) if r["schedule"] == s)]
          for s in SCHEDULES for m in MODELS}
    for row in rows:
        print(f"simgrid: {row['schedule']:15s} {row['payload']:8s} {row['link']:4s} N={row['workers']:3d} "
              f"formula {row['formula_s']:10.3f} s  max-min x{row['max-min_over_formula']:.3f}  "
              f"tcp x{row['tcp_over_formula']:.3f}", file=sys.stderr)
    return {
        "name": "simgrid",
        "ratio": max(abs(v - 1) for v in ratios["max-min"]) + 1,
        "goal": "max-min within 1 % of the formula (same schedule, no TCP); tcp: differences explained",
        "range_by_schedule_and_model": by,
        "rows": rows,
        "setup": f"SimGrid star of N hosts (N = {list(peers)}), links {[l[:3] for l in LINKS]} (name, Mbit/s, "
                 "one-way ms), S = float32 parameters of resnet18 and mlp width 1728; ratio = the largest "
                 "max-min / formula",
        "method": __doc__.strip(),
    }
