"""Loading Numba-cached machine code without Numba's registry refresh (``ustc.cache._lean``)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest
from cache_helpers import numba_source

from ustc.cache import _lean

# Runs generated kernels (serial twin, parallel, sparse output) and a hand-written one (the DIA
# route), checks them against SciPy, then compiles something new in the same process.
WORKER = textwrap.dedent('''
    import json, sys
    import numpy as np
    import scipy.sparse as sp
    import ustc

    rng = np.random.default_rng(7)
    checks = {}
    for name, n, density in (("small", 300, 0.02), ("parallel", 60_000, 1e-4)):
        S = sp.random(n, n + 5, density=density, format="csr", random_state=rng)
        x = rng.random(n + 5)
        checks[name] = bool(np.allclose(ustc.Tensor.from_package(S) @ x, S @ x))
    T = sp.diags([rng.random(999), rng.random(1000), rng.random(999)], [-1, 0, 1], format="csr")
    D = ustc.Tensor.from_package(T).convert("DIAI")
    checks["dia"] = bool(np.allclose(D @ np.ones(1000), T @ np.ones(1000)))
    S = sp.random(40, 30, density=0.2, format="csr", random_state=rng)
    A = ustc.Tensor.from_package(S)
    checks["add"] = bool(np.allclose((A + A).to_dense(), 2 * S.toarray()))
    refreshed = "numba.np.arraymath" in sys.modules  # imported only by Numba's registry refresh

    import numba
    fresh = numba.njit(lambda a: np.sum(np.sqrt(a)))(np.full(4, 4.0))  # still compiles after a lean load
    print(json.dumps({"checks": checks, "refreshed": refreshed, "fresh": float(fresh),
                      "stats": ustc.cache.stats()}))
''')


def _run(cache_dir, **env) -> dict:
    done = subprocess.run([sys.executable, "-c", WORKER], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, USTC_CACHE_DIR=str(cache_dir), **env))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_warm_process_loads_without_the_registry_refresh_and_stays_correct(cache_dir):
    cold = _run(cache_dir)
    assert all(cold["checks"].values()), cold["checks"]
    assert cold["stats"]["compiled"] >= 2 and cold["refreshed"]  # CSR + CSR runs the merge kernels, not a generated one

    warm = _run(cache_dir)
    assert all(warm["checks"].values()), warm["checks"]
    assert (warm["stats"]["compiled"], warm["stats"]["generated"]) == (0, 0)
    assert warm["stats"]["loaded"] >= 2
    assert not warm["refreshed"], "a warm load ran Numba's registry refresh"
    assert warm["fresh"] == 8.0

    default = _run(cache_dir, USTC_NUMBA_LEAN_LOAD="0")  # the escape hatch: Numba's own path
    assert all(default["checks"].values()) and default["refreshed"]
    assert default["stats"]["compiled"] == 0 and default["fresh"] == 8.0


def _import_as(name: str, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def cached_module(tmp_path, monkeypatch):
    """Imports a tiny ``cache=True`` kernel file under fresh names; its first import compiles and
    saves, so later imports find Numba's cache entry."""
    path = tmp_path / "lean_kernel.py"
    path.write_text(numba_source(offset=3))
    names = []

    def load(tag: str):
        names.append(f"lean_kernel_{tag}_{os.getpid()}")
        return _import_as(names[-1], path)

    first = load("compile")
    assert first.k(1.0) == 5.0 and first.k.stats.cache_misses
    yield load
    for name in names:
        sys.modules.pop(name, None)


def test_a_lean_cache_loads_what_numba_saved(cached_module):
    module = cached_module("lean")
    assert _lean.adopt(module.k)
    assert type(module.k._cache).__name__ == "LeanCache"
    assert module.k(2.0) == 7.0
    assert sum(module.k.stats.cache_hits.values()) == 1 and not module.k.stats.cache_misses


def test_a_failed_lean_load_falls_back_to_numbas_path(cached_module, monkeypatch):
    module = cached_module("fallback")
    _lean.adopt(module.k)

    def broken(target_context):
        raise RuntimeError("simulated")

    monkeypatch.setattr(_lean, "_link_runtime", broken)
    assert module.k(2.0) == 7.0
    assert sum(module.k.stats.cache_hits.values()) == 1  # loaded, not recompiled


def test_adopt_leaves_compiled_and_foreign_dispatchers_alone(cached_module, monkeypatch):
    module = cached_module("compiled")
    module.k(1.0)  # has an overload now: its cache is not swapped under it
    assert not _lean.adopt(module.k)
    assert type(module.k._cache).__name__ == "FunctionCache"

    class Custom:
        _cache = object()
        overloads = {}

    assert not _lean.adopt(Custom())
    monkeypatch.setenv("USTC_NUMBA_LEAN_LOAD", "0")
    assert not _lean.enabled()
    assert _lean.adopt_module(cached_module("disabled")) == 0


def test_njit_cached_gives_hand_written_kernels_the_lean_cache():
    from ustc.kernels import _dia

    kernels = [v for v in vars(_dia).values() if hasattr(v, "py_func")]
    assert len(kernels) >= 3 and all(isinstance(k._cache, _lean.lean_cache_class()) for k in kernels)
