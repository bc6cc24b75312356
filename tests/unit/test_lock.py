"""The machine lock (launchers/lock.py): a sweep or benchmark waits for (or refuses beside) another one that
holds it, names the holder, and the runs it starts (jobs, baselines) run under it without waiting for it.

The lock file is the test's own (AVGBENCH_LOCK_PATH), never the machine's."""
import os

import pytest

from launchers.lock import HOLDER_ENV, PATH_ENV, MachineLock, status


@pytest.mark.timeout(30)
def test_status_names_the_holder_and_whether_this_process_holds_it(tmp_path, monkeypatch):
    monkeypatch.setenv(PATH_ENV, str(tmp_path / "machine.lock"))
    monkeypatch.delenv(HOLDER_ENV, raising=False)
    assert status("wait")["holder"] is None
    lock = MachineLock()
    lock.acquire("wait")
    try:
        found = status("wait")
        assert found["holder"]["pid"] == os.getpid() and found["under_lock"] is True
    finally:
        lock.release()
    assert status("wait")["holder"] is None and HOLDER_ENV not in os.environ
