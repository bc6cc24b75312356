"""Import layers: the import-linter contracts of pyproject.toml ([tool.importlinter]), checked in this process, and
the rules import-linter cannot express: the top-level modules (train.py, avgbench_cli.py, docs/generate.py are no
packages, so no root of its graph), every package in a layer, metrics/__init__.py importing nothing, and metrics
importing no module by name but a run's cost model (strategies are found by name at run time, by job/registry.py).
"""
import ast
import copy
import sys

import pytest

try:
    import grimp
    from importlinter import configuration
    from importlinter.application import use_cases
    from importlinter.contracts.forbidden import ForbiddenContract
    from importlinter.contracts.layers import LayersContract
except ImportError as exc:
    raise ImportError(f"{exc}: import-linter is a test dependency (requirements-dev.txt; scripts/setup.sh installs it)") \
        from None

from helpers import ROOT

pytestmark = pytest.mark.timeout(120)

PYPROJECT = ROOT / "pyproject.toml"
configuration.configure()
OPTIONS = use_cases.read_user_options(str(PYPROJECT))
ROOTS = OPTIONS.session_options["root_packages"]
CONTRACTS = {contract["id"]: contract for contract in OPTIONS.contracts_options}
CONTRACT_TYPES = {"layers": LayersContract, "forbidden": ForbiddenContract}
# Modules outside the packages, top to bottom: what each may not import of the project (the packages' layers below
# them are allowed), and every project module may import none of them.
TOP_MODULES = {
    "docs.generate": set(),
    "avgbench_cli": {"docs", "bench", "hydra_plugins"},
    "train": {"docs", "avgbench_cli", "bench", "hydra_plugins"},
}
NOT_CHECKED = ("tests", "scripts")
DYNAMIC_IMPORTS = {"import_module", "__import__", "spec_from_file_location", "module_from_spec"}

GRAPH = grimp.build_graph(*ROOTS, include_external_packages=True, cache_dir=None)


def broken(graph: grimp.ImportGraph) -> list[str]:
    """Names of the contracts the graph breaks."""
    found = []
    for options in CONTRACTS.values():
        contract = CONTRACT_TYPES[options["type"]](name=options["name"], session_options=OPTIONS.session_options,
                                                   contract_options=options)
        if not contract.check(copy.deepcopy(graph), verbose=False).kept:
            found.append(options["id"])
    return found


def test_lint_imports_keeps_every_contract():
    """The report, as `lint-imports` prints it (shown below a failure)."""
    assert use_cases.lint_imports(str(PYPROJECT), cache_dir=None, no_logo=True) == use_cases.SUCCESS


def test_every_package_has_a_layer():
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - set(NOT_CHECKED)
    plugins = {f"hydra_plugins.{p.parent.name}" for p in ROOT.glob("hydra_plugins/*/__init__.py")}
    assert packages | plugins == set(ROOTS), f"packages not among import-linter's root_packages: {packages | plugins}"
    layered = {name.strip() for layer in CONTRACTS["packages"]["layers"] for name in layer.split("|")}
    assert layered == set(ROOTS), f"root packages in no layer of the contract 'packages': {set(ROOTS) - layered}"
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in ROOT.glob("*.py")} | {
        ".".join(p.relative_to(ROOT).with_suffix("").parts) for p in ROOT.glob("docs/*.py")}
    assert modules == set(TOP_MODULES), f"top-level modules: add them to TOP_MODULES in {__file__}"


def test_metrics_package_imports_nothing():
    """metrics/ only holds layers: an import in its __init__ would sit in none of them."""
    assert GRAPH.find_modules_directly_imported_by("metrics") == set()


def imported_modules(path) -> set[str]:
    """Every module a source file imports, at any depth (relative ones as written, without their dots)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            found |= {node.module} if node.module else {alias.name for alias in node.names}
    return found


@pytest.mark.parametrize("module", TOP_MODULES)
def test_top_level_modules_import_only_down(module):
    imported = {name.split(".")[0] for name in imported_modules(ROOT / f"{module.replace('.', '/')}.py")}
    above_or_beside = imported & TOP_MODULES[module]
    assert not above_or_beside, f"{module} imports {above_or_beside}, above or beside it"


def test_no_package_imports_a_top_level_module():
    found = {(importer, top) for top in {m.split(".")[0] for m in TOP_MODULES} if top in GRAPH.modules
             for importer in GRAPH.find_modules_that_directly_import(top)}
    assert not found, found


def test_no_test_imports_another_test():
    """What tests share lives in tests/helpers.py (or conftest.py)."""
    found = [f"{path.relative_to(ROOT)} imports {name}" for path in sorted((ROOT / "tests").rglob("test_*.py"))
             for name in imported_modules(path) if name.rpartition(".")[2].startswith("test_")]
    assert not found, "\n".join(found)


def dynamic_imports(module: str, source: str) -> list[str]:
    """Calls that import a module by name (importlib.import_module, __import__, importlib.util's loaders)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            if name in DYNAMIC_IMPORTS:
                found.append(f"{module}:{node.lineno} calls {name}")
    return found


BY_NAME = "metrics/projection/models.py"  # the one import by name in metrics: the cost model a run's config names


def test_metrics_imports_no_module_by_name():
    """Where a figure comes from a strategy, the strategy hands it over (e.g. its link bound as a function)."""
    found = [v for path in sorted((ROOT / "metrics").rglob("*.py")) if str(path.relative_to(ROOT)) != BY_NAME
             for v in dynamic_imports(str(path.relative_to(ROOT)), path.read_text())]
    assert not found, "\n".join(found)


# Modules the system Python runs from a copy of netemu/ alone (tests/integration/test_netem.py, without root)
STANDALONE = ("netemu", "netemu.fabric", "netemu.goodput")


def outside_the_standard_library(graph: grimp.ImportGraph, module: str) -> set[str]:
    """What a module imports, at any depth, that is neither netemu's nor the standard library's."""
    return {name for name in graph.find_upstream_modules(module)
            if name.split(".")[0] != "netemu" and name.split(".")[0] not in sys.stdlib_module_names}


@pytest.mark.parametrize("module", STANDALONE)
def test_the_standalone_fabric_imports_only_the_standard_library(module):
    assert outside_the_standard_library(GRAPH, module) == set()


def test_the_fabrics_default_frame_is_the_standard_one_a_projection_assumes():
    """The payload share of standard frames is measured on the fabric's default links (bench/goodput.py)."""
    from metrics.summary import bounds
    from netemu import fabric
    assert fabric.ETHERNET_MTU == bounds.ETHERNET_MTU


# --- the checks find what they are for ------------------------------------------------------
@pytest.mark.parametrize("importer, imported, contract", [
    ("metrics.summary.isolation", "netemu.dilation", "packages"),
    ("job.worker", "strategies.ps", "packages"),
    ("netemu.cpu", "strategies.ps", "packages"),  # beside it in one layer
    ("metrics.projection.project", "strategies.ps", "packages"),  # a strategy's runtime
    ("metrics.summary.bounds", "strategies.cost_models.ring", "below-the-cost-models"),
    ("metrics.recording.steplog", "metrics.summary.bounds", "metrics"),
    ("strategies.cost_models.ring", "metrics.projection.link", "cost-models"),
    ("strategies.cost_models.ring", "strategies.base", "cost-models"),
    ("strategies.cost_models.ring", "job.worker", "cost-models"),
    ("metrics.projection.cost", "metrics.projection.link", "below-the-cost-models"),
    ("metrics.projection.cost", "strategies.cost_models.ring", "below-the-cost-models"),
    ("metrics.projection.models", "strategies.cost_models.ring", "packages"),  # by name only, as a config says
    ("metrics.report.render", "strategies.cost_models.ring", "packages"),
])
def test_an_import_running_back_up_is_found(importer, imported, contract):
    graph = copy.deepcopy(GRAPH)
    graph.add_import(importer=importer, imported=imported, line_number=1, line_contents=f"import {imported}")
    assert contract in broken(graph)  # others may break too, through chains of imports that lead back up


@pytest.mark.parametrize("importer, imported", [
    ("strategies.base", "metrics.summary.bounds"),
    ("metrics.summary.isolation", "metrics.recording.units"),
    ("strategies.cost_models.ring", "metrics.projection.cost"),
])
def test_an_import_down_the_layers_is_allowed(importer, imported):
    graph = copy.deepcopy(GRAPH)
    graph.add_import(importer=importer, imported=imported, line_number=1, line_contents=f"import {imported}")
    assert broken(graph) == []


@pytest.mark.parametrize("imported", ["metrics.summary.bounds", "psutil"])
def test_a_standalone_module_importing_beyond_the_standard_library_is_found(imported):
    graph = copy.deepcopy(GRAPH)
    graph.add_import(importer="netemu.fabric", imported=imported, line_number=1, line_contents=f"import {imported}")
    assert imported in outside_the_standard_library(graph, "netemu")


def test_an_import_by_name_is_found():
    source = "import importlib\ndef strategy(name):\n    return importlib.import_module(f'strategies.{name}')"
    assert dynamic_imports("metrics.summary.build", source) == ["metrics.summary.build:3 calls import_module"]
