"""``ustc.warm_cache`` / ``ustc cache warm``: specs are checked before any work, warming stores
the kernels a later call of the same operation loads, and errors are reported per spec."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import ustc
import ustc.cache as cache
from ustc.cli import main
from ustc.ops import warm

SMALL = ((16, 4), (40, 3))     # the two warming sizes, shrunk: the test checks the mechanism


@pytest.fixture
def small_sizes(monkeypatch):
    monkeypatch.setattr(warm, "_SIZES", SMALL)


@pytest.mark.parametrize("text,match", [("spmv", "not OP:FORMATS:DTYPE"), ("fly:CSR:float64", "unknown operation"),
                                        ("spmv:CSR:float65", "unknown dtype"), ("spmv::float64", "names 0 formats"),
                                        ("add:CSR,COO,CSC:float64", "names 3 formats")])
def test_bad_specs_are_refused(text, match):
    with pytest.raises(ustc.UstcError, match=match):
        warm.WarmSpec.parse(text)
    with pytest.raises(ustc.UstcError, match=match):
        ustc.warm_cache(["spmv:CSR:float64", text])


def test_spec_text_round_trips():
    spec = warm.WarmSpec.parse(" add : CSR , COO : float32 ")
    assert spec == warm.WarmSpec("add", ("CSR", "COO"), "float32") and str(spec) == "add:CSR,COO:float32"
    assert str(warm.WarmSpec.parse("spmv:CSR:float64")) == "spmv:CSR:float64"
    assert all(isinstance(warm.WarmSpec.parse(s), warm.WarmSpec) for s in warm.DEFAULT_SPECS)
    dsl = "(i, j) -> (j : dense, i : compressed)"
    assert warm.WarmSpec.parse(f"spgemm:BSR(2, 2),{dsl}:float64").formats == ("BSR(2, 2)", dsl)


@pytest.mark.parametrize("op", warm.OPERATIONS)
def test_every_operation_warms(op, small_sizes):
    fmts = "CSR,CSC" if op in ("transpose", "convert") else "CSR"
    [result] = ustc.warm_cache([f"{op}:{fmts}:float64"], processes=1)
    assert result.error is None, result.error


def test_warming_stores_what_the_call_loads(small_sizes):
    [result] = ustc.warm_cache(["add:CSR,COO:float32"], processes=1)
    assert result.error is None
    stored = {e.key for e in cache.entries()}
    assert stored
    cache._forget()                    # a new process's view: only the disk
    cache.reset_stats()
    a = ustc.random(30, 30, 0.2, rng=1, dtype=np.float32)
    b = ustc.random(30, 30, 0.2, rng=2, dtype=np.float32, tensor_format="COO")
    np.testing.assert_allclose((a + b).to_dense(), a.to_dense() + b.to_dense())
    assert cache.stats()["generated"] == 0 and cache.stats()["disk_hits"] >= 1
    assert {e.key for e in cache.entries()} == stored


def test_failures_are_reported_not_raised(small_sizes):
    results = ustc.warm_cache(["spmv:CSR:float64", "spmv:Structured(2, 4):bool"], processes=1)
    assert results[0].error is None
    assert results[1].error and results[1].spec == "spmv:Structured(2, 4):bool"


def test_cli(capsys, small_sizes):
    assert main(["cache", "warm", "spmv:CSR:float64", "-j", "1"]) == 0
    out = capsys.readouterr().out
    assert "spmv:CSR:float64" in out and "warmed 1 of 1" in out
    assert main(["cache", "warm", "fly:CSR:float64"]) == 1
    assert "unknown operation 'fly'" in capsys.readouterr().err


def test_worker_processes(tmp_path):
    """Two spawned workers warm two specs into the cache directory of the environment."""
    code = ("import ustc; from ustc.ops import warm; warm._SIZES = ((16, 4),);"
            "r = ustc.warm_cache(['spmv:CSR:float64', 'sum:COO:float32'], processes=2);"
            "print([x.error for x in r])")
    env = dict(os.environ, USTC_CACHE_DIR=str(tmp_path / "c"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("[None, None]")
    assert any((tmp_path / "c").rglob("*.py"))
