"""bench/run.py's command line: each benchmark's own options (--NAME-...) reach its run() as keyword arguments, the
options left out keep run()'s defaults, and bad options fail before any benchmark runs (unit tier: nothing runs)."""
import inspect
from pathlib import Path

import pytest

from bench import collectives, projection
from bench.jobs import grid_settings
from bench.run import BENCHMARKS, idle_options, module_of, options_of, owner_of, parser
from job.registry import resolve


def parsed(*argv: str):
    return parser().parse_args(list(argv))


def test_a_benchmarks_options_become_its_run_arguments():
    args = parsed("thesis", "emulation", "--thesis-families", "hivemind", "--thesis-repeats", "2",
                  "--emulation-strategies", "ps,ring", "--emulation-headline-sweep", "multirun/x")
    assert options_of("thesis", args) == {"names": "hivemind", "repeats": 2}
    assert options_of("emulation", args) == {"strategies": "ps,ring", "headline_sweep": Path("multirun/x")}
    assert options_of("noise", args) == {}  # none given: run()'s defaults
    assert options_of("collectives", parsed("collectives", "--collectives-grid", "rates=20")) == {"text": "rates=20"}



def test_an_option_belongs_to_the_longest_benchmark_name_it_starts_with():
    """noise_scale's options start with "noise_", so they were also taken for noise's (and refused as idle)."""
    args = parsed("noise_scale", "--noise_scale-grid", "repeats=2")
    assert options_of("noise_scale", args) == {"text": "repeats=2"}
    assert options_of("noise", args) == {}
    assert idle_options(args) == []

class Declared:
    """Stands in for the parser: the dests of the options a benchmark declares."""

    def __init__(self):
        self.dests = []

    def add_argument(self, *flags, dest=None, **_):
        self.dests.append(dest or flags[0].lstrip("-").replace("-", "_"))


def test_every_option_names_a_parameter_of_its_benchmarks_run():
    """An option whose name run() does not take would fail only when the benchmark starts, hours into a session (a
    module with two benchmarks, emulation's: each option reaches the one it is named after)."""
    modules = {spec.split(":")[0] for spec in BENCHMARKS.values()}
    with_options = 0
    for module in sorted(modules):
        declared = Declared()
        if add_arguments := getattr(module_of(module), "add_arguments", None):
            add_arguments(declared)
            with_options += 1
        for dest in declared.dests:
            owner = owner_of(dest)
            assert owner and BENCHMARKS[owner].startswith(f"{module}:"), (module, dest)
            assert dest.removeprefix(f"{owner}_") in inspect.signature(resolve(BENCHMARKS[owner])).parameters, dest
    assert with_options >= 5


def test_options_for_a_benchmark_not_run_are_refused():
    assert idle_options(parsed("noise", "--thesis-families", "hivemind")) == ["thesis"]
    assert idle_options(parsed("--thesis-families", "hivemind")) == []  # all benchmarks run, thesis among them
    with pytest.raises(SystemExit):
        parsed("thesis", "--thesis-repeats", "three")


@pytest.mark.parametrize("benchmark, option", [(collectives, "--collectives-grid"), (projection, "--projection-grid")])
def test_a_grid_takes_known_keys_only(benchmark, option):
    default = grid_settings(benchmark.DEFAULT_GRID, option)
    assert grid_settings(benchmark.DEFAULT_GRID, option, "rates=20 peers=2,4") == default | {"rates": "20",
                                                                                           "peers": "2,4"}
    for bad in ("rate=20", "rates", "peers=2 nonsense=1"):
        with pytest.raises(ValueError, match=option):
            grid_settings(benchmark.DEFAULT_GRID, option, bad)


def test_an_interrupted_abba_goes_on_from_its_log_without_measuring_again(tmp_path):
    from bench.jobs import abba

    log, measured = tmp_path / "pairs.jsonl", []

    def measure(arm, stop_after=None):
        if stop_after is not None and len(measured) == stop_after:
            raise KeyboardInterrupt
        measured.append(arm)
        return {"arm": arm, "n": len(measured)}

    with pytest.raises(KeyboardInterrupt):
        abba(3, lambda arm: measure(arm, stop_after=3), log)
    assert measured == [True, False, False]
    with_arm, without = abba(3, measure, log)
    assert measured == [True, False, False, True, True, False]  # only the three runs the log lacked, in ABBA order
    assert [r["n"] for r in with_arm] == [1, 4, 5] and [r["n"] for r in without] == [2, 3, 6]
    other = tmp_path / "other.jsonl"
    other.write_text('{"pair": 0, "arm": false, "result": {}}\n')  # another order's log
    with pytest.raises(ValueError, match="holds pair 0 arm False where pair 0 arm True comes next"):
        abba(3, measure, other)


def test_a_cost_log_from_two_machines_is_refused():
    from bench.reference_cost import one_machine

    here = {"cpu_vendor": "GenuineIntel", "cpu_model_name": "Xeon", "cpu_family": "6", "cpu_model": "207",
            "cpu_mhz": 2100, "cores": 2, "kernel": "6.18"}
    there = here | {"cpu_model": "167", "cpu_mhz": 2600}
    assert one_machine([{"machine": here}, {"machine": dict(here)}]) == here
    for mixed in ([{"machine": here}, {"machine": there}], [{"machine": here}, {}]):  # {}: an older log's run
        with pytest.raises(ValueError, match="more than one machine"):
            one_machine(mixed)
