"""What the benchmarks share: their grids and choices, ABBA pairs, and running an avgbench job to read its summary."""
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from metrics.recording.jsonl import read_jsonl
from metrics.recording.rundir import RunDir
from metrics.summary.schema import Summary

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def grid_settings(default: str, option: str, text: str | None = None) -> dict[str, str]:
    """The `key=value` words of `default`, overridden by `text` (`option`'s value); ValueError on another key."""
    settings = dict(item.split("=", 1) for item in default.split())
    for word in (text or "").split():
        key, equals, value = word.partition("=")
        if not equals or key not in settings:
            raise ValueError(f"{option}: {word!r} is not KEY=VALUE with KEY one of {', '.join(settings)}")
        settings[key] = value
    return settings


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",")]


def abba(pairs: int, measure: Callable[[bool], T], log: Path | None = None) -> tuple[list[T], list[T]]:
    """measure(True) and measure(False) in `pairs` pairs, ABBA order: (the True arm's results, the False arm's).
    With a log (JSON lines), each result is appended as it ends, and the results it already holds are taken in
    order instead of measuring again: an interrupted benchmark goes on where it stopped."""
    kept = read_jsonl(log) if log and log.exists() else []
    found: dict[bool, list[T]] = {True: [], False: []}
    for pair in range(pairs):
        for arm in (True, False) if pair % 2 == 0 else (False, True):
            if kept:
                entry = kept.pop(0)
                if (entry["pair"], entry["arm"]) != (pair, arm):
                    raise ValueError(f"{log}: holds pair {entry['pair']} arm {entry['arm']} where pair {pair} arm "
                                     f"{arm} comes next (a log of another order or benchmark)")
                found[arm].append(entry["result"])
                continue
            found[arm].append(measure(arm))
            if log:
                with log.open("a") as f:
                    f.write(json.dumps({"pair": pair, "arm": arm, "result": found[arm][-1]}) + "\n")
    return found[True], found[False]


def choices(text: str | None, known: Collection[T], convert: Callable[[str], T], option: str, what: str = "",
            error: Callable[[str], BaseException] = ValueError) -> list[T]:
    """The choices `text` (`option`'s comma list; empty: all `known`) names, in its order; error(message) on another."""
    picked = [convert(part.strip()) for part in (text or "").split(",") if part.strip()]
    if unknown := [c for c in picked if c not in known]:
        raise error(f"{option}: unknown {what + ' ' if what else ''}{', '.join(map(str, unknown))} "
                    f"(here: {', '.join(map(str, known))})")
    return picked or list(known)


def named(available: dict[str, T], text: str, option: str, what: str) -> dict[str, T]:
    """The entries of `available` that `text` names (choices), in their order there."""
    picked = choices(text, available, str, option, what)
    return {name: value for name, value in available.items() if name in picked}


def averaging_strategies(benchmark: str) -> dict[str, list[str]]:
    """Every averaging strategy -> its overrides in `benchmark` (Strategy.benchmark_overrides)."""
    from launchers.config import strategy_by_name
    from launchers.plugins import strategy_configs

    found = {name: strategy_by_name(name) for name in strategy_configs()}
    return {name: [f"strategy={name}", *strategy.benchmark_overrides.get("*", ()),
                   *strategy.benchmark_overrides.get(benchmark, ())]
            for name, strategy in found.items() if not strategy.is_baseline}


def run_train(run_dir: Path, *overrides: str, timeout: float = 900) -> None:
    """Run train.py with overrides into run_dir; a failure raises with the end of its stderr."""
    result = subprocess.run([sys.executable, "train.py", f"hydra.run.dir={run_dir}", "progress=false", *overrides],
                            cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if result.returncode:
        raise RuntimeError(f"train.py {' '.join(overrides)} failed:\n{result.stderr[-2000:]}")


@contextmanager
def train(*overrides: str, timeout: float = 900) -> Iterator[Path]:
    """Run train.py with overrides in a temporary run directory; yields the directory."""
    with tempfile.TemporaryDirectory() as tmp:
        run_train(Path(tmp), *overrides, timeout=timeout)
        yield Path(tmp)


def summary_of(*overrides: str, timeout: float = 900) -> Summary:
    with train(*overrides, timeout=timeout) as run_dir:
        return Summary.load(RunDir(run_dir).summary)
