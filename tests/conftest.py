"""Shared test configuration.

* ``tests/`` is put on ``sys.path`` so test modules can ``from strategies import formats``.
* ``counted_plans``: a list that every ``ustc.Matmul.plan`` call appends its Matmul to (the
  plan cache is emptied first, so a plan made by an earlier test is not silently reused).
* Hypothesis profile ``ci`` (the default here): no deadline, since the first parse in a
  worker builds the Lark parser, and derandomized, so every run tries the same examples.
  ``HYPOTHESIS_PROFILE=dev`` draws fresh ones.
"""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import HealthCheck, settings

TESTS = os.path.dirname(os.path.abspath(__file__))
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

# ci: the same examples on every run (a submission's CI result does not depend on luck);
# dev (HYPOTHESIS_PROFILE=dev): fresh random examples, to hunt for new failures.
settings.register_profile("ci", deadline=None, print_blob=True, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, max_examples=20)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite tests/codegen/golden/*.py from the current code generator")


@pytest.fixture
def counted_plans(monkeypatch):
    """Every ``ustc.Matmul.plan`` call of the test, in order (the Matmul instances); starts
    from an empty plan cache."""
    import ustc
    from ustc.ops import plan_cache

    plan_cache.clear()
    plans = []
    original = ustc.Matmul.plan

    def counting(self):
        plans.append(self)
        return original(self)

    monkeypatch.setattr(ustc.Matmul, "plan", counting)
    return plans
