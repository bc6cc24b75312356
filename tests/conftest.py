"""Test set-up: the import path, the run_dir fixture, the tiers and the unit tier's no-process rule.

Shared helpers live in tests/helpers.py. Two tiers, one folder each (a test's folder and its marker agree,
enforced below):
    pytest tests/unit           unit tier: no test may start a process (enforced below)
    pytest tests/integration    real runs, collectives, mpirun, horovodrun, namespaces (marked integration)
"""
import _posixsubprocess
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import helpers  # noqa: E402  (needs the sys.path entry above)

# matplotlib builds its font cache on first use by running fc-list: do it here, before the
# unit tier's no-process guard, so a fresh machine's first plot in a unit test is not refused.
import matplotlib.font_manager  # noqa: E402,F401
# bench/results.py asks git for the commit new results record (COMMIT) when it loads: load it here too.
import bench.results  # noqa: E402,F401

INTEGRATION = "integration"
TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="session", autouse=True)
def own_machine_lock(tmp_path_factory):
    """Sweeps and benchmarks the tests start take a lock file of their own, not the machine's (launchers/lock.py):
    a real sweep running beside the tests neither blocks them nor is blocked by them."""
    from launchers.lock import PATH_ENV

    saved = os.environ.get(PATH_ENV)
    os.environ[PATH_ENV] = str(tmp_path_factory.mktemp("machine_lock") / "machine.lock")
    yield
    if saved is None:
        os.environ.pop(PATH_ENV, None)
    else:
        os.environ[PATH_ENV] = saved


@pytest.fixture
def run_dir(tmp_path):
    yield tmp_path / "run"
    if (tmp_path / "run" / ".avgbench" / "run_id").exists():  # never leak processes into the next test
        for proc in helpers.leftover_processes(tmp_path / "run"):
            os.kill(proc.pid, signal.SIGKILL)


# --- a test's folder is its tier ------------------------------------------------------
def pytest_collection_modifyitems(config, items):
    misplaced = [item.nodeid for item in items
                 if (TESTS / INTEGRATION in Path(item.path).parents) != bool(item.get_closest_marker(INTEGRATION))]
    if misplaced:
        raise pytest.UsageError(f"tests/{INTEGRATION}/ holds the tests marked {INTEGRATION}, tests/unit/ the others; "
                                f"misplaced: {', '.join(misplaced)}")


# --- the unit tier starts no process --------------------------------------------------
class ProcessInUnitTest(RuntimeError):
    """A test without @pytest.mark.integration tried to start a process."""


# Every way a Python process starts another: subprocess (its own alias of fork_exec, or
# os.posix_spawn), multiprocessing's spawn (_posixsubprocess.fork_exec), fork and os.system.
_LAUNCHERS = [(subprocess, "_fork_exec"), (_posixsubprocess, "fork_exec"), (os, "fork"), (os, "forkpty"),
              (os, "posix_spawn"), (os, "posix_spawnp"), (os, "system")]


@contextlib.contextmanager
def _no_processes(item):
    if item.get_closest_marker(INTEGRATION):
        yield
        return
    saved = [(module, name, getattr(module, name)) for module, name in _LAUNCHERS if hasattr(module, name)]

    def refuse(*args, **kwargs):
        raise ProcessInUnitTest(f"{item.nodeid} starts a process ({args[0] if args else ''!r}): "
                                f"mark it @pytest.mark.{INTEGRATION}")

    for module, name, _ in saved:
        setattr(module, name, refuse)
    try:
        yield
    finally:
        for module, name, original in saved:
            setattr(module, name, original)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    with _no_processes(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    with _no_processes(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    with _no_processes(item):
        return (yield)
