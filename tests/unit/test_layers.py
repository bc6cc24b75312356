"""Import layers, read from the source (AST parsing only: nothing is imported, no process starts).

Top to bottom. A module may import its own package and any layer below it, never one above it (no import runs
back up); packages side by side in one layer are independent of each other.

    docs                           docs/generate.py: renders the pages from the benchmarks' results
    bench, train, hydra_plugins    the benchmarks, the Hydra entry point, its plugin shims (hydra_plugins/avgbench_*:
                                   hydra_plugins is a namespace that installed plugins share)
    launchers                      starting and watching a run's processes, the config's checks, sweeps
    netemu, strategies             the emulated cluster; the averaging strategies
    job                            the peer side: a worker's training loop, data, model, evaluation
    metrics.report                 comparing runs (python -m metrics.report)
    metrics.projection             predictions on other links and peer counts (python -m metrics.projection)
    strategies.cost_models         each strategy's cost model: configuration only, named by the projection
    metrics.projection.cost        what a cost model receives, and the base class every model extends
    metrics.summary                one run's summary.json
    metrics.recording              what runs while a run runs: run directory, step log, samplers, unit names

Strategies are found by name at run time (job/registry.py resolves the config's strategy.target): below them no
module imports one (a cost model is no strategy: strategies/cost_models/ holds configuration only, no runtime), and
metrics imports no module by name at run time either. The tests may import any layer.
"""
import ast
from pathlib import Path

import pytest

from helpers import ROOT

LAYERS = [
    ("docs",),
    ("bench", "train", "hydra_plugins.avgbench_launcher", "hydra_plugins.avgbench_sweeper"),
    ("launchers",),
    ("netemu", "strategies"),
    ("job",),
    ("metrics.report",),
    ("metrics.projection",),
    ("strategies.cost_models",),
    ("metrics.projection.cost",),
    ("metrics.summary",),
    ("metrics.recording",),
]
GROUPS = ("metrics",)  # a package that only holds layers: its __init__ imports nothing
NOT_CHECKED = ("tests",)
DYNAMIC_IMPORTS = {"import_module", "__import__", "spec_from_file_location", "module_from_spec"}


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def sources() -> dict[str, Path]:
    """Module -> file, for every .py of the repository but the tests (hidden folders left out)."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if not any(p.startswith(".") for p in parts) and parts[0] not in NOT_CHECKED:
            found[module_name(path)] = path
    return found


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def place(module: str) -> tuple[int, str] | None:
    """(layer index, package) of a module (0 = the top), or None: unplaced, a group, or not the project's."""
    matches = [(index, package) for index, layer in enumerate(LAYERS) for package in layer if within(module, package)]
    return max(matches, key=lambda m: len(m[1]), default=None)


def imports(module: str, source: str, known: set[str]) -> list[tuple[int, str]]:
    """(line, module) of every import in the source, at any depth (inside functions too); `from A import B`
    names A.B where B is a module."""
    is_package = any(k.startswith(module + ".") for k in known)
    package = module if is_package else module.rpartition(".")[0]  # where a relative import starts
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the importing module's package
                parts = package.split(".")
                base = ".".join([*parts[:len(parts) - node.level + 1], *([base] if base else [])])
            found += [(node.lineno, f"{base}.{a.name}" if f"{base}.{a.name}" in known else base) for a in node.names]
    return sorted(set(found))


def violations(module: str, source: str, known: set[str]) -> list[str]:
    """Imports of `module` that run back up a layer, or cross to a package beside it."""
    own = place(module)
    if own is None:
        return []
    found = []
    for line, target in imports(module, source, known):
        other = place(target)
        if other is None or other[1] == own[1]:
            continue
        if other[0] < own[0]:
            found.append(f"{module}:{line} imports {target}, a layer above it ({other[1]} over {own[1]})")
        elif other[0] == own[0]:
            found.append(f"{module}:{line} imports {target}, beside it in one layer ({other[1]}, {own[1]})")
    return found


def dynamic_imports(module: str, source: str) -> list[str]:
    """Calls that import a module by name (importlib.import_module, __import__, importlib.util's loaders)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            if name in DYNAMIC_IMPORTS:
                found.append(f"{module}:{node.lineno} calls {name}")
    return found


SOURCES = sources()
KNOWN = set(SOURCES)


def test_every_module_has_a_layer():
    unplaced = [m for m in SOURCES if place(m) is None and m not in GROUPS]
    assert not unplaced, f"modules in no layer (add their package to LAYERS, tests/unit/test_layers.py): {unplaced}"
    for group in GROUPS:
        assert not imports(group, SOURCES[group].read_text(), KNOWN), f"{group}/__init__.py imports"


def test_no_import_runs_back_up():
    found = [v for m, path in SOURCES.items() for v in violations(m, path.read_text(), KNOWN)]
    assert not found, "\n".join(found)


def test_metrics_imports_no_module_by_name():
    """Where a figure comes from a strategy, the strategy hands it over (e.g. its link bound as a function)."""
    found = [v for m, path in SOURCES.items() if within(m, "metrics") and place(m) is not None
             for v in dynamic_imports(m, path.read_text())]
    assert not found, "\n".join(found)


# --- the checks find what they are for ------------------------------------------------------
KNOWN_HERE = KNOWN | {"netemu.dilation", "strategies.ps", "metrics.summary.bounds", "strategies.cost_models.ring"}


@pytest.mark.parametrize("module, source, expected", [
    ("metrics.summary.isolation", "from netemu.dilation import TIME_SUFFIXES", "a layer above it"),
    ("job.worker", "def f():\n    import strategies.ps", "a layer above it"),
    ("metrics.recording.steplog", "from ..summary import bounds", "a layer above it"),
    ("netemu.cpu", "from strategies import ps", "beside it"),
    ("metrics.projection.project", "import strategies.ps", "a layer above it"),  # a strategy's runtime
    ("strategies.cost_models.ring", "from metrics.projection.link import Link", "a layer above it"),
])
def test_an_import_running_back_up_is_found(module, source, expected):
    found = violations(module, source, KNOWN_HERE)
    assert len(found) == 1 and expected in found[0], found


@pytest.mark.parametrize("module, source", [
    ("strategies.base", "from metrics.summary.bounds import Round"),
    ("metrics.summary.isolation", "from metrics.recording.units import TIME_SUFFIXES\nimport numpy"),
    ("metrics.projection.models", "from strategies.cost_models.ring import RingCost"),  # a cost model: below it
    ("strategies.cost_models.ring", "from metrics.projection.cost import CostModel"),
])
def test_an_import_down_the_layers_is_allowed(module, source):
    assert violations(module, source, KNOWN_HERE) == []


def test_an_import_by_name_is_found():
    source = "import importlib\ndef strategy(name):\n    return importlib.import_module(f'strategies.{name}')"
    assert dynamic_imports("metrics.summary.build", source) == ["metrics.summary.build:3 calls import_module"]
