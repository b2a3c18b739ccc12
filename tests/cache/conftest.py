"""Every kernel-cache test runs against its own cache directory and fresh process counters."""

from __future__ import annotations

import pytest

import ustc.cache as cache


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    root = tmp_path / "ustc-cache"
    monkeypatch.setenv("USTC_CACHE_DIR", str(root))
    cache._forget()
    cache.reset_stats()
    yield root
    cache._forget()
    cache.reset_stats()
