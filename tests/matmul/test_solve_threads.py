"""Thread counts of host solves: ``ustc._threads.free_cores`` / ``limited`` and the choice
``ustc.ops.krylov.solve_threads`` makes per solve."""

from __future__ import annotations

import numba
import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from ustc import _threads
from ustc.ops import krylov


def test_free_cores_reads_runnable_threads(monkeypatch, tmp_path):
    cpus = len(__import__("os").sched_getaffinity(0))
    assert 1 <= _threads.free_cores() <= cpus
    real_open = open

    def fake(running):
        def opener(path, *args, **kw):
            if path == "/proc/loadavg":
                target = tmp_path / "loadavg"
                target.write_text(f"0.5 0.5 0.5 {running}/300 1234\n")
                return real_open(target, *args, **kw)
            return real_open(path, *args, **kw)
        return opener

    monkeypatch.setattr("builtins.open", fake(1))
    assert _threads.free_cores() == cpus                       # only the caller runs
    monkeypatch.setattr("builtins.open", fake(cpus + 5))
    assert _threads.free_cores() == 1                          # never below one


def test_limited_restores_the_count():
    before = numba.get_num_threads()
    with _threads.limited(1) as used:
        assert used == 1 and numba.get_num_threads() == 1
    assert numba.get_num_threads() == before
    with _threads.limited(before + 4) as used:               # never raises the count
        assert used == before


def poisson(n):
    return sp.diags_array([-1.0, -1.0, 4.0, -1.0, -1.0], offsets=[-n, -1, 0, 1, n], shape=(n * n, n * n),
                          format="csr")


def test_small_systems_leave_the_count(monkeypatch):
    a = ustc.Tensor.from_package(poisson(20))
    assert krylov.solve_threads(a, np.ones(400), krylov.HOST, "cpu") is None
    assert krylov.solve_threads(a, np.ones(400), krylov.HOST, "cuda") is None


def test_large_systems_keep_numbas_count_unless_asked(monkeypatch):
    """The load-adaptive count is opt-in: /proc/loadavg counts the whole host's runnable threads."""
    s = poisson(520)
    a = ustc.Tensor.from_package(s)
    monkeypatch.setattr(_threads, "free_cores", lambda: 1)
    monkeypatch.delenv(_threads.ADAPTIVE_VAR, raising=False)
    assert krylov.solve_threads(a, np.ones(s.shape[0]), krylov.HOST, "cpu") is None
    monkeypatch.setenv(_threads.ADAPTIVE_VAR, "0")
    assert krylov.solve_threads(a, np.ones(s.shape[0]), krylov.HOST, "cpu") is None
    monkeypatch.setenv(_threads.ADAPTIVE_VAR, "1")
    assert krylov.solve_threads(a, np.ones(s.shape[0]), krylov.HOST, "cpu") == 1


@pytest.mark.parametrize("method", ["cg", "bicgstab", "gmres"])
def test_large_system_beside_a_busy_core_runs_on_one_thread(monkeypatch, method):
    """Above the one-thread sizes the solve takes the cores free; with one free, every parallel
    kernel runs on one thread (through the fused loops of krylov.FUSED) and the answer is
    unchanged."""
    s = poisson(520)                                        # 270,400 rows: past _vector.SERIAL_LENGTH
    a = ustc.Tensor.from_package(s)
    b = np.ones(s.shape[0])
    monkeypatch.setattr(_threads, "free_cores", lambda: 1)
    monkeypatch.setenv(_threads.ADAPTIVE_VAR, "1")
    seen, fused = [], []
    inner_run = krylov._run
    monkeypatch.setattr(krylov, "_run", lambda *args: seen.append(numba.get_num_threads()) or inner_run(*args))
    monkeypatch.setattr(krylov, "FUSED", {name: (lambda fn: lambda *args: fused.append(1) or fn(*args))(fn)
                                          for name, fn in krylov.FUSED.items()})
    x, info = ustc.solve(a, b, method, maxiter=40, check=False, return_info=True)
    assert seen == [1] and fused
    assert info.residual_norm == pytest.approx(np.linalg.norm(b - s @ x), rel=1e-6)
