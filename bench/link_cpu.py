"""What the emulated wire costs its hosts' cores, by frame size: why network.mtu defaults to 9000."""
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.goodput import measure_rate
from bench.jobs import grid_settings, ints

DEFAULT_GRID = "rate=150 mtus=1500,9000 repeats=2 seconds=10"
IDLE_STATES = (3, 4)  # /proc/stat's idle and iowait columns (after the cpu name)


def busy_and_total() -> tuple[int, int]:
    """The machine's busy and total clock ticks over all its cores, since boot (/proc/stat's first line)."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:9]]  # user .. steal; guest time is inside user
    return sum(ticks) - sum(ticks[i] for i in IDLE_STATES), sum(ticks)


def measure(rate: float, mtu: int, seconds: float, tmp: Path) -> dict:
    """bench/goodput.py's repeat, its hosts on a core each, with the machine's busy share over it."""
    cores = sorted(os.sched_getaffinity(0))
    busy0, total0 = busy_and_total()
    repeat = measure_rate(rate, seconds, tmp, mtu=mtu, host_cores=[[cores[0]], [cores[-1]]])
    busy1, total1 = busy_and_total()
    return {"mtu": mtu, "link_mbit": rate, "busy_share": (busy1 - busy0) / (total1 - total0),
            "payload_share_by_stream": repeat["payload_share_by_stream"], "link_faithful": repeat["faithful"],
            "link": repeat["link"]}


def run(text: str | None = None) -> dict:
    settings = grid_settings(DEFAULT_GRID, "--link_cpu-grid", text)
    rate, mtus = float(settings["rate"]), ints(settings["mtus"])
    repeats, seconds = int(settings["repeats"]), float(settings["seconds"])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(repeats):
            for mtu in mtus if repeat % 2 == 0 else mtus[::-1]:
                row = measure(rate, mtu, seconds, Path(tmp)) | {"repeat": repeat}
                print(f"link_cpu: {mtu}-byte frames, repeat {repeat}: cores {row['busy_share']:.0%} busy, payload "
                      f"share {', '.join(f'{s:.3f}' for s in row['payload_share_by_stream'])}; {row['link']}",
                      file=sys.stderr, flush=True)
                rows.append(row)
    by_mtu: dict[str, dict[str, Any]] = {
        str(mtu): {"busy_share": statistics.fmean(r["busy_share"] for r in rows if r["mtu"] == mtu),
                   "busy_share_range": [f(r["busy_share"] for r in rows if r["mtu"] == mtu) for f in (min, max)],
                   "payload_share": statistics.fmean(s for r in rows if r["mtu"] == mtu
                                                     for s in r["payload_share_by_stream"])}
        for mtu in mtus}
    return {
        "name": "link_cpu",
        "ratio": by_mtu[str(mtus[0])]["busy_share"] / by_mtu[str(mtus[-1])]["busy_share"],
        "goal": f"measured (no goal): the cores' busy share at {mtus[0]}-byte frames / at {mtus[-1]}-byte frames",
        "by_mtu": by_mtu,
        "rows": rows,
        "setup": f"2 emulated hosts on a core each, one TCP stream each way at once at {rate:g} Mbit/s, frames of "
                 f"{mtus} bytes, {repeats} alternated repeats of {seconds:g} s",
    }
