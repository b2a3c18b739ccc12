"""The DIA SpMV kernels' blocks and groups of diagonals (``ustc.kernels._dia``): every row block
adds up to ``GROUP`` diagonals in one pass over the rows they all meet and the rest of each
diagonal on its own. Checked against SciPy's DIA product on random offsets (0 to 2 * GROUP + 1
diagonals, so one to three groups and a short last one), square, tall and wide shapes that end
inside a block, values stored by row (DIAI) and by column (DIAJ), overwrite (the output starts
full of NaN) and accumulate, both kernels; the inputs are left unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ustc.kernels import _dia

KERNELS = (_dia.dia_spmv, _dia.dia_spmv_serial)


def dia_storage(offsets, data, shape, by_column: bool):
    """The kernels' ``vals`` for ``data[d, j]`` = ``A[j - o, j]`` (SciPy's DIA layout, by column)."""
    m, n = shape
    if by_column:
        return data.ravel().copy(), n
    vals = np.zeros((len(offsets), m))
    for d, o in enumerate(offsets):
        rows = np.arange(max(0, -o), min(m, n - o))
        vals[d, rows] = data[d, rows + o]
    return vals.ravel(), m


@st.composite
def cases(draw):
    m = draw(st.sampled_from([1, 5, _dia.BLOCK - 1, _dia.BLOCK + 37, 2 * _dia.BLOCK + 3]))
    n = draw(st.sampled_from([m, 1, max(1, m // 3), m + 900]))
    count = draw(st.integers(0, min(2 * _dia.GROUP + 1, m + n - 1)))
    offsets = draw(st.lists(st.integers(-m + 1, n - 1), min_size=count, max_size=count, unique=True))
    return (m, n), np.array(offsets, dtype=np.int64), draw(st.booleans()), draw(st.booleans()), \
        draw(st.sampled_from(KERNELS)), draw(st.integers(0, 2 ** 16))


@settings(max_examples=40, deadline=None)
@given(cases())
def test_blocks_and_groups_match_scipy(case):
    _check(*case)


@pytest.mark.parametrize("count", range(1, 2 * _dia.GROUP + 2))
@pytest.mark.parametrize("overwrite", [True, False])
def test_every_group_size(count, overwrite):
    """Each group size's one-pass sum (a call per size in ``_group``), storing and adding: every
    size once as a whole group and once as a short last one, its rows met by all in the middle."""
    m = _dia.BLOCK + 37
    offsets = np.arange(-(count // 2), count - count // 2, dtype=np.int64) * 3
    _check((m, m), offsets, count % 2 == 0, overwrite, _dia.dia_spmv_serial, count)


def _check(shape, offsets, by_column, overwrite, kernel, seed):
    """The kernel's ``y`` against SciPy's DIA product; the inputs unchanged."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    data = rng.uniform(0.5, 1.5, (len(offsets), shape[1]))
    expected = sp.dia_array((data, offsets), shape=shape) @ (x := rng.uniform(-1, 1, shape[1]))
    vals, diag_len = dia_storage(offsets, data, shape, by_column)
    y = np.full(shape[0], np.nan) if overwrite else rng.uniform(-1, 1, shape[0])
    if not overwrite:
        expected = expected * 0.5 + y
    before = (offsets.copy(), vals.copy(), x.copy())
    kernel(offsets, vals, x, y, 0.5 if not overwrite else 1.0, shape[0], shape[1], diag_len, by_column, overwrite)
    np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-12)
    for a, b in zip(before, (offsets, vals, x)):
        np.testing.assert_array_equal(a, b)


def test_float32_and_complex():
    """The group sums keep the operands' dtype (one compile per dtype)."""
    m = _dia.BLOCK + 5
    offsets = np.array([-3, -1, 0, 1, 2, 40], dtype=np.int64)
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.complex128):
        data = rng.uniform(-1, 1, (len(offsets), m)).astype(dtype)
        x = rng.uniform(-1, 1, m).astype(dtype)
        vals, diag_len = dia_storage(offsets, data, (m, m), True)
        y = np.full(m, np.nan, dtype=dtype)
        _dia.dia_spmv_serial(offsets, vals, x, y, dtype(2), m, m, diag_len, True, True)
        import scipy.sparse as sp
        expected = 2 * (sp.dia_array((data, offsets), shape=(m, m)) @ x)
        np.testing.assert_allclose(y, expected, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)
