"""Shared test configuration.

* ``tests/`` is put on ``sys.path`` so test modules can ``from strategies import formats``.
* ``counted_plans``: a list that every ``ustc.Matmul.plan`` call appends its Matmul to (the
  plan cache is emptied first, so a plan made by an earlier test is not silently reused).
* ``suite_kernel_cache``: every test of a run, in every xdist worker, shares one kernel cache
  directory: ``$USTC_CACHE_DIR`` when set (e.g. an empty one for a cold run), else
  ``.pytest_cache/d/ustc-kernels`` (warm on a developer's later runs, empty in a clean CI
  checkout; the user's own cache is never touched), so a kernel that tests of several
  directories need compiles once a run (tests/ops once switched each worker to a directory of
  its own: a cold run compiled 76 kernel signatures in both, 30 CPU s). Tests that need an empty
  cache set their own directory (``tests/cache``, ``fresh_cache``, ...).
* Hypothesis profile ``ci`` (the default here): no deadline, since the first parse in a
  worker builds the Lark parser, and derandomized, so every run tries the same examples.
  ``HYPOTHESIS_PROFILE=dev`` draws fresh ones.
"""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import HealthCheck, settings

import ustc.cache as kernel_cache

TESTS = os.path.dirname(os.path.abspath(__file__))
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

# ci: the same examples on every run (a submission's CI result does not depend on luck);
# dev (HYPOTHESIS_PROFILE=dev): fresh random examples, to hunt for new failures.
settings.register_profile("ci", deadline=None, print_blob=True, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, max_examples=20)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session", autouse=True)
def suite_kernel_cache(request, tmp_path_factory):
    """The run's kernel cache directory (see the module docstring), set before the first test."""
    root = os.environ.get("USTC_CACHE_DIR")
    if not root:
        provider = getattr(request.config, "cache", None)     # absent under -p no:cacheprovider
        if provider is not None:
            root = str(provider.mkdir("ustc-kernels"))
        else:                                                  # the run's base temporary directory
            base = tmp_path_factory.getbasetemp()
            root = str((base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "ustc-kernels")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("USTC_CACHE_DIR", root)
        kernel_cache._forget()
        yield root
    kernel_cache._forget()


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
