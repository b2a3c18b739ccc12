"""Fixtures of the Matmul / solve tests."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(autouse=True)
def fresh_plan_cache():
    from ustc.ops import plan_cache

    plan_cache.clear()
    yield
    plan_cache.clear()
