"""``kernels._race.KernelRace`` (a choice between interchangeable kernels by measured time) and its uses in
the diagonal-mask SpMV (``kernels._diagonal_spmv.Diagonals``: row kernel against the vector kernel) and in the
power-law SpMV (``kernels._hot_columns.HotColumns``: renumbered columns over ``z`` against the operand's own
over ``x``), with an injected clock so the outcome does not depend on this machine."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp

from ustc.kernels import _hot_columns
from ustc.kernels._diagonal_spmv import Diagonals, lanes_fit
from ustc.kernels._hot_columns import HotColumns
from ustc.kernels._race import KernelRace


class Clock:
    """Each timed call of kernel ``k`` lasts ``cost[k]`` seconds."""

    def __init__(self, cost):
        self.t, self.cost, self.race, self.started = 0.0, cost, None, False

    def __call__(self):
        if self.started:
            self.t += self.cost[self.race.pick()]
        self.started = not self.started
        return self.t


def _race(cost, rounds=3):
    clock = Clock(cost)
    race = KernelRace(len(cost), rounds, clock)
    clock.race = race
    return race


@pytest.mark.parametrize("cost,winner", [((2.0, 1.0), 1), ((1.0, 2.0), 0), ((1.0, 1.0), 0), ((3.0, 2.0, 1.0), 2)])
def test_race_alternates_then_keeps_the_fastest(cost, winner):
    race, ran = _race(cost), []
    for _ in range(len(cost) * 3):
        race.timed(lambda k: ran.append(k))
    assert ran == list(range(len(cost))) * 3            # alternating while open
    assert race.winner == winner and race.best == list(cost)
    for _ in range(4):
        race.timed(lambda k: ran.append(k))
    assert ran[-4:] == [winner] * 4                       # untimed from then on
    assert race.calls == len(cost) * 3


def test_race_keeps_the_best_time_of_each_kernel():
    clock = iter([0.0, 5.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0]).__next__   # kernel 0: 5 then 1; kernel 1: 1, 1
    race = KernelRace(2, 2, clock)
    for _ in range(4):
        race.timed(lambda k: None)
    assert race.best == [1.0, 1.0] and race.winner == 0


def test_one_kernel_needs_no_race_and_arguments_are_checked():
    race = KernelRace(1, 3, clock=lambda: pytest.fail("a lone kernel is never timed"))
    race.timed(lambda k: None)
    assert race.winner == 0
    with pytest.raises(ValueError, match="at least one kernel"):
        KernelRace(0)
    with pytest.raises(ValueError, match="one round"):
        KernelRace(2, 0)


def _stencil(side):
    one = sp.diags([-np.ones(side - 1), 2 * np.ones(side), -np.ones(side - 1)], [-1, 0, 1])
    eye = sp.identity(side)
    a = (sp.kron(sp.kron(one, eye), eye) + sp.kron(sp.kron(eye, one), eye) + sp.kron(sp.kron(eye, eye), one)).tocsr()
    a.sort_indices()
    return sp.csr_array((a.data, a.indices.astype(np.int32), a.indptr.astype(np.int32)), shape=a.shape)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("cost,winner", [((1.0, 2.0), 0), ((2.0, 1.0), 1)], ids=["row-wins", "lanes-win"])
@pytest.mark.parametrize("accumulate", [False, True])
def test_diagonals_race_is_right_at_every_call(dtype, cost, winner, accumulate):
    a = _stencil(42)                                     # 74,088 rows, 509,040 entries: above MIN_ENTRIES
    vals = a.data.astype(dtype)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(a.shape[1]).astype(dtype)
    kept = Diagonals.of(a.indptr, a.indices, 2)
    assert kept is not None
    race = _race(cost)
    kept = dataclasses.replace(kept, race=race)
    y0 = rng.standard_normal(a.shape[0]).astype(dtype)
    want = 1.5 * (sp.csr_array((vals.astype(np.float64), a.indices, a.indptr), shape=a.shape) @ x.astype(np.float64)) \
        + (y0.astype(np.float64) if accumulate else 0)
    tol = 1e-12 if dtype == np.float64 else 1e-4
    for call in range(9):
        y = y0.copy()
        kept.spmv(y, vals, x, 1.5, accumulate)
        np.testing.assert_allclose(y, want, rtol=tol, atol=tol * np.abs(want).max(), err_msg=f"call {call}")
    fits = lanes_fit(y, vals, x, 1.5)
    assert race.winner == (winner if fits else None)     # no vector kernel (no AVX-512): the row kernel, no race
    assert race.calls == (6 if fits else 0)


def _power_law(rng, n_rows, n_cols, dtype):
    """Rows of 0-30 entries (one of 150) over columns drawn with probability ~ rank^-1.5, hubs spread."""
    weights = (np.arange(1, n_cols + 1) ** -1.5)[rng.permutation(n_cols)]
    lengths = rng.integers(0, 31, n_rows)
    lengths[n_rows // 2] = 150
    cols = [np.unique(rng.choice(n_cols, k, p=weights / weights.sum())) for k in lengths]
    pos = np.concatenate(([0], np.cumsum([len(c) for c in cols]))).astype(np.int32)
    vals = rng.standard_normal(pos[-1]) + (1j * rng.standard_normal(pos[-1]) if np.dtype(dtype).kind == "c" else 0)
    return sp.csr_array((vals.astype(dtype), np.concatenate(cols).astype(np.int32), pos), shape=(n_rows, n_cols))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex64])
@pytest.mark.parametrize("cost,winner", [((1.0, 2.0), 0), ((2.0, 1.0), 1)], ids=["own-wins", "renumbered-wins"])
@pytest.mark.parametrize("accumulate", [False, True])
def test_hot_columns_race_is_right_at_every_call(dtype, cost, winner, accumulate, monkeypatch):
    """Both kernels (masked where the dtype fits it, else gather_spmv) match SciPy at every call, x
    changed between calls; the race settles after six calls on the faster, and only the renumbered
    kernel fills z."""
    monkeypatch.setattr(_hot_columns, "HOT", 16)
    fills, fill = [], _hot_columns.fill_hot
    monkeypatch.setattr(_hot_columns, "fill_hot", lambda *args: fills.append(1) or fill(*args))
    rng = np.random.default_rng(0)
    a = _power_law(rng, 150, 200, dtype)
    kept = HotColumns.of(a.indptr, a.indices, 200, 2)
    assert kept is not None
    race = _race(cost)
    kept = dataclasses.replace(kept, race=race)
    y0 = rng.standard_normal(150).astype(dtype)
    wide = np.dtype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64)
    tol = 1e-12 if np.dtype(dtype).itemsize == 8 and wide == np.float64 else 1e-4
    for call in range(9):
        x = rng.standard_normal(200).astype(dtype)
        want = 1.5 * (sp.csr_array((a.data.astype(wide), a.indices, a.indptr), shape=a.shape) @ x.astype(wide)) \
            + (y0.astype(wide) if accumulate else 0)
        y = y0.copy()
        kept.spmv(y, a.data, x, 1.5, accumulate)
        np.testing.assert_allclose(y, want, rtol=tol, atol=tol * np.abs(want).max(), err_msg=f"call {call}")
    assert race.winner == winner and race.calls == 6
    assert len(fills) == 3 + (3 if winner == 1 else 0)   # calls 1, 3, 5 of the race, then 6-8 if it won
