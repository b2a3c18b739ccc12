"""Operation tests share one kernel cache directory per test run.

Every xdist worker of a run points ``USTC_CACHE_DIR`` at the same directory (under
the run's base temporary directory), so a kernel compiled by one worker is loaded
from disk by the others, and the user's own cache is never touched. The cache is
safe under concurrent processes (atomic writes, verified entries).
"""

from __future__ import annotations

import os
import warnings

import pytest

import ustc.cache as cache
from ustc import ConversionWarning


@pytest.fixture(scope="session", autouse=True)
def ops_kernel_cache(tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "ustc-ops-kernels"
    root.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("USTC_CACHE_DIR", str(root))
        cache._forget()
        yield root
    cache._forget()


@pytest.fixture(autouse=True)
def _quiet_conversions():
    """Conversions the planner chooses are checked where they matter, not on every test."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConversionWarning)
        yield


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty kernel cache and zeroed counters for one test (kernels are generated, so
    planner warnings show and ``cache.stats()`` counts only this test)."""
    monkeypatch.setenv("USTC_CACHE_DIR", str(tmp_path / "kernels"))
    cache._forget()
    cache.reset_stats()
    yield tmp_path / "kernels"
    cache._forget()
