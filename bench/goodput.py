"""The payload goodput of an emulated link: the share of its nominal rate a TCP stream carries as payload
(bench/results/link_goodput.json), with which every projection converts a link's nominal rate."""
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.jobs import grid_settings, ints
from netemu.fabric import ETHERNET_MTU, Fabric

DEFAULT_GRID = "rates=20,100,150 repeats=3 seconds=4 mtus=1500,9000"
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


def probe(hosts: int, mbit: float, seconds: float, meter_path: Path | None = None,
          beside: Callable[[Fabric], list[subprocess.Popen[str]]] | None = None,
          mtu: int = ETHERNET_MTU, host_cores: list[list[int]] | None = None) -> list[float]:
    """Payload goodput in Mbit/s of `hosts` TCP streams at once, host i sending to host i+1 (on host_cores[i]);
    meter_path: the token buckets metered into it; beside(fabric): processes run beside the streams."""
    from netemu import Fabric
    from netemu.goodput import LinkMeter

    started: list[subprocess.Popen[str] | subprocess.Popen[bytes]] = []
    with Fabric(hosts, [mbit] * hosts, mtu=mtu, host_cores=host_cores) as fabric:
        meter = None
        try:
            if beside:
                started += beside(fabric)
            receivers = [subprocess.Popen([*h.enter, sys.executable, "-c", PROBE_RECEIVE], stdout=subprocess.PIPE,
                                          text=True) for h in fabric.hosts]
            started += receivers
            meter = LinkMeter(fabric, meter_path).start() if meter_path else None
            started += [subprocess.Popen([*h.enter, sys.executable, "-c", PROBE_SEND,
                                          fabric.hosts[(h.index + 1) % hosts].addr, str(seconds)])
                        for h in fabric.hosts]
            rates = [float(r.communicate(timeout=seconds + 60)[0]) * 8 / 1e6 for r in receivers]
        finally:
            if meter:
                meter.stop()
            for proc in started:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
    return rates


def measure_rate(mbit: float, seconds: float, tmp: Path, mtu: int = ETHERNET_MTU,
                 host_cores: list[list[int]] | None = None) -> dict:
    """One repeat at one rate: each stream's payload goodput and share, and the links' verdict (netemu.goodput)."""
    from metrics.summary.link import judge

    meter = tmp / f"meter-{mbit:g}-{mtu}-{time.monotonic_ns()}.json"
    streams = probe(2, mbit, seconds, meter, mtu=mtu, host_cores=host_cores)
    link = judge(json.loads(meter.read_text())["directions"])
    return {"link_mbit": mbit, "payload_mbit_by_stream": streams, "payload_share_by_stream": [s / mbit for s in streams],
            "wire_goodput_share": link["goodput_share"], "faithful": bool(link["faithful"]), "link": link["reason"]}


def figures(rows: list[dict]) -> dict:
    """shares_of the repeats in standard Ethernet's frames (its mean: the conversion), and per frame size."""
    by_mtu = {str(mtu): shares_of([r for r in rows if r["mtu"] == mtu]) for mtu in dict.fromkeys(r["mtu"] for r in rows)}
    return shares_of([r for r in rows if r["mtu"] == ETHERNET_MTU]) | {"by_mtu": by_mtu}


def shares_of(rows: list[dict]) -> dict:
    """payload_share over these repeats' counted streams, its spread, and per rate."""
    counted = [r for r in rows if r["faithful"]]
    if not counted:
        raise RuntimeError("no repeat held its link rate (every one's wire goodput fell below its share): nothing "
                           "measures the protocol here; run it on a quieter machine")

    def spread(shares: list[float]) -> dict:
        return {"mean": statistics.fmean(shares), "min": min(shares), "max": max(shares), "streams": len(shares)}

    shares = [s for r in counted for s in r["payload_share_by_stream"]]
    by_rate = {str(rate): spread([s for r in counted if r["link_mbit"] == rate for s in r["payload_share_by_stream"]])
               for rate in dict.fromkeys(r["link_mbit"] for r in counted)}
    share = statistics.fmean(shares)
    return {"payload_share": share, "protocol_overhead": 1 / share - 1, "spread": spread(shares),
            "by_rate": by_rate, "not_counted": len(rows) - len(counted)}


def run(text: str | None = None) -> dict:
    settings = grid_settings(DEFAULT_GRID, "--goodput-grid", text)
    rates, repeats, seconds = ints(settings["rates"]), int(settings["repeats"]), float(settings["seconds"])
    mtus = ints(settings["mtus"])
    if ETHERNET_MTU not in mtus:
        raise ValueError(f"--goodput-grid: mtus must hold {ETHERNET_MTU}, the frames of the links a projection is for")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(repeats):
            cases = [(mbit, mtu) for mbit in rates for mtu in mtus]
            for mbit, mtu in cases if repeat % 2 == 0 else cases[::-1]:  # alternated: a drift favours no case
                row = measure_rate(mbit, seconds, Path(tmp), mtu) | {"repeat": repeat, "mtu": mtu}
                print(f"goodput: {mbit} Mbit/s, {mtu}-byte frames, repeat {repeat}: payload share "
                      f"{', '.join(f'{s:.3f}' for s in row['payload_share_by_stream'])}; {row['link']}",
                      file=sys.stderr, flush=True)
                rows.append(row)
    found = figures(rows)
    return {
        "name": "link_goodput",
        "ratio": found["payload_share"],
        "goal": "measured (no goal): the payload share of a link's nominal rate the projection converts with",
        **found,
        "rows": rows,
        "setup": f"2 emulated hosts, one TCP stream each way at once, rates {rates} Mbit/s, frames of {mtus} bytes "
                 f"(payload_share: {ETHERNET_MTU}, standard Ethernet), {repeats} alternated repeats of {seconds:g} s",
    }
