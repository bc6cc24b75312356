"""The report's formatters: shares, sizes and intervals, with the numbers and counts every output shares
(metrics/recording/formats.py); units sit beside them."""
import math
import statistics
from collections.abc import Callable

from metrics.recording.formats import MISSING, counted, number, significant  # noqa: F401 (the report's too)
from metrics.report.stats import Ratio, factor


def phase_name(phase: str) -> str:
    """A wall phase as the report names it: "precise_bn_s" -> "precise bn"."""
    return phase.removesuffix("_s").replace("_", " ")


def percent(value: float | None) -> str:
    """A share as percent with one decimal, no sign: 0.123 -> "12.3"."""
    return MISSING if value is None else f"{100 * value:.1f}"


def rounded_percent(value: float) -> str:
    """A share as percent to two significant digits: 0.123 -> "12"."""
    return number(100 * value, 2)


def share(value: float | None) -> str:
    """A share as a whole percent with its sign: 0.123 -> "12%"; None -> "no"."""
    return "no" if value is None else f"{value:.0%}"


def mib(n_bytes: float | None) -> str:
    return MISSING if n_bytes is None else f"{n_bytes / 2**20:,.1f}"


def size(n_bytes: float) -> str:
    """Bytes in MiB, KiB or bytes, with the unit."""
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= scale:
            return f"{number(n_bytes / scale)} {unit}"
    return f"{number(n_bytes)} bytes"


def cpus(count: int) -> str:
    return counted(count, "CPU")


def blocks_text(n: int, censored: int = 0, unit: str = "block", dropped: int = 0) -> str:
    return (counted(n, unit) + (f", {censored} censored" if censored else "")
            + (f"; {dropped} left out: no bound (both missed, or a run covered nothing)" if dropped else ""))


def median_text(values: list[float], show: Callable[[float], str], unit: str) -> str:
    """median (range low–high, n runs) of values, each shown by show(value), in unit."""
    if min(values) == max(values):
        return f"{show(values[0])}{unit} ({'1 run' if len(values) == 1 else f'all {len(values)} runs'})"
    return (f"median {show(statistics.median(values))}{unit} (range {show(min(values))}–{show(max(values))}{unit}, "
            f"{counted(len(values), 'run')})")


def times_over(value: float) -> str:
    """A ratio's x/÷ factor: 1.25 -> "×/÷1.25" (a ratio beyond 1.25 or below 1/1.25)."""
    return f"×/÷{value:.2f}"


def interval_text(ratio: Ratio | None, unit: str = "×") -> str:
    """A paired ratio: (bound sign) estimate [low, high] (x/÷ factor, blocks) at 95 %; without an interval, why."""
    if ratio is None or not ratio.n:
        return "n/a (no paired block)"
    estimate = f"{ratio.bound}{ratio.estimate:.2f}{unit}"
    interval = ratio.interval()
    if interval is None:
        return f"{estimate} ({ratio.why_no_interval}: no interval)"
    low, high = interval
    spread = f"{times_over(factor(interval))}, " if 0 < low and high < math.inf else ""
    return f"{estimate} [{low:.2f}, {high:.2f}] ({spread}{blocks_text(ratio.n, ratio.imputed, 'block', ratio.dropped)})"
