"""Numbers and counts as every printed output shows them (the report's and the projection's), units beside them."""
import math

MISSING = "–"


def number(value: float | None, digits: int = 3) -> str:
    """`digits` significant digits; from 10**digits on, whole with thousands separators; ∞ for a miss."""
    if value is None:
        return MISSING
    if math.isinf(value):
        return "∞"
    if value == 0:
        return "0"
    return f"{value:.{digits}g}" if abs(value) < 10 ** digits else f"{value:,.0f}"


def significant(value: float | None, digits: int = 3) -> str:
    return MISSING if value is None else f"{value:.{digits}g}"


def counted(n: int, unit: str) -> str:
    """"1 run", "2 runs"."""
    return f"{n} {unit}{'s' if n != 1 else ''}"
