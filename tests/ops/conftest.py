"""Fixtures of the operation tests (the run's kernel cache is tests/conftest.py's)."""

from __future__ import annotations

import warnings

import pytest

import ustc.cache as cache
from ustc import ConversionWarning


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
