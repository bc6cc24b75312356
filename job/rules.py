"""A knob's allowed values (Rule), checked before launch by the config's schema and the strategies' Strategy.rules."""
from dataclasses import dataclass
from typing import Callable, TypeGuard

from omegaconf import ListConfig


@dataclass(frozen=True)
class Rule:
    """Allowed values of one knob: `accepts(value)`, and what it `expects` in words (the error's middle)."""
    accepts: Callable[[object], bool]
    expects: str


def number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def integer(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def by_rank(value: object, accepts: Callable[[object], bool]) -> bool:
    """A list of per-rank values, each null (the default) or accepted."""
    return isinstance(value, (list, ListConfig)) and all(v is None or accepts(v) for v in value)


def integer_from(low: int) -> Rule:
    return Rule(lambda v: integer(v) and v >= low, f"must be >= {low} (a whole number)")


def above(low: float) -> Rule:
    return Rule(lambda v: number(v) and v > low, f"must be > {low:g}")


def within(low: float, high: float) -> Rule:
    """low <= value < high."""
    return Rule(lambda v: number(v) and low <= v < high, f"must be in [{low:g}, {high:g})")


def one_of(*choices: str) -> Rule:
    return Rule(lambda v: v in choices, f"must be one of {', '.join(choices)}")
