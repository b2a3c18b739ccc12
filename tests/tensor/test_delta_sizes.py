"""delta(b) conversions count before they allocate: a padded level that would not fit the memory
budget raises StorageError (naming the entries, the bytes and the narrowest width that fits)
instead of allocating; under the budget results are unchanged."""

import re
import tracemalloc

import numpy as np
import pytest

import ustc
from ustc.errors import StorageError, UstcError
from ustc.format.levels.delta import PACKABLE_BITS, Delta, memory_budget
from ustc.formats import DELTA

BUDGET = "USTC_MEMORY_BUDGET"


def _counts(cols):
    """Entries ``delta(b)`` stores for one row holding ``cols`` (sorted), for b = 1..32."""
    gaps = np.diff(np.concatenate([[-1], np.asarray(cols, dtype=np.int64)])) - 1
    return {b: int((gaps >> b).sum()) + len(gaps) for b in range(1, 33)}


def _wide_row():
    """A 1 x 2**31 row: a few entries with gaps of about 2**30, so delta(1) would need ~1e9 entries."""
    cols = np.array([0, 1, 2, 1 << 30, (1 << 30) + 3, (1 << 31) - 1], dtype=np.int64)
    vals = np.arange(1, len(cols) + 1, dtype=np.float64)
    return cols, vals, (1, 1 << 31)


def _number(message, label):
    m = re.search(label, message)
    assert m, message
    return int(m.group(1).replace(",", ""))


# -- (1) over budget: StorageError, nothing big allocated -------------------------------------
@pytest.mark.parametrize("packed", [False, True])
def test_over_budget_raises_before_allocating(monkeypatch, packed):
    monkeypatch.setenv(BUDGET, str(1 << 20))  # 1 MiB
    cols, vals, shape = _wide_row()
    want = _counts(cols)
    assert want[1] > 1_000_000_000
    src = ustc.Tensor.from_coo((np.zeros(len(cols), dtype=np.int64), cols), vals, shape, "CSR")
    fmt = "(i, j) -> (i : dense, j : delta(1, packed))" if packed else DELTA(1)
    with pytest.raises(StorageError):  # once untraced: first calls import modules and fill caches
        src.convert(fmt)
    tracemalloc.start()
    try:
        with pytest.raises(StorageError) as err:
            src.convert(fmt)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"peak {peak} bytes while refusing"
    msg = str(err.value)
    assert msg.startswith("level 1 (j : delta(1")
    assert f"{want[1]:,} entries" in msg  # thousands separators
    level = Delta(bits=1, packed=packed)
    assert f"{level.storage_bytes(want[1], 8):,} bytes" in msg
    # the narrowest fitting width: the smallest b whose crd + values fit 1 MiB
    fits = [b for b in range(1, 33) if Delta(bits=b).storage_bytes(want[b], 8) <= 1 << 20]
    suggested = _number(msg, r"narrowest width that fits is b = (\d+)")
    if packed:
        packable = [b for b in PACKABLE_BITS
                    if Delta(bits=b, packed=True).storage_bytes(want[b], 8) <= 1 << 20]
        assert suggested == (packable[0] if packable else fits[0])
    else:
        assert suggested == fits[0]
    assert f"{want[suggested]:,} entries" in msg


def test_from_dense_and_from_coo_refuse_too(monkeypatch):
    monkeypatch.setenv(BUDGET, "1000")
    x = np.zeros((3, 5000))
    x[:, -1] = 1.0
    with pytest.raises(StorageError, match=r"level 1 \(j : delta\(2\)\): delta\(2\) would store "
                                            r"3,750 entries"):
        ustc.Tensor.from_dense(x, DELTA(2))
    with pytest.raises(StorageError, match="3,750 entries"):
        ustc.Tensor.from_coo((np.arange(3), np.full(3, 4999)), np.ones(3), (3, 5000), DELTA(2))


def test_values_dtype_counts(monkeypatch):
    """Budget bytes are crd plus values: float32 values fit where float64 ones do not."""
    x = np.zeros((4, 100), dtype=np.float32)
    x[:, 0] = 1
    x[:, 99] = 2
    count = 4 * _counts([0, 99])[4]  # entries of delta(4), 1 byte of crd each
    monkeypatch.setenv(BUDGET, str(count * (1 + 4)))
    t = ustc.Tensor.from_dense(x, DELTA(4))
    np.testing.assert_array_equal(t.to_dense(), x)
    with pytest.raises(StorageError, match=f"{count:,} entries"):
        ustc.Tensor.from_dense(x.astype(np.float64), DELTA(4))


def test_no_width_fits(monkeypatch):
    monkeypatch.setenv(BUDGET, "10")
    x = np.zeros((2, 40))
    x[:, 39] = 1
    with pytest.raises(StorageError, match="no delta width fits"):
        ustc.Tensor.from_dense(x, DELTA(1))


def test_budget_variable(monkeypatch):
    monkeypatch.setenv(BUDGET, "12345")
    assert memory_budget() == 12345
    monkeypatch.setenv(BUDGET, "lots")
    with pytest.raises(UstcError, match=BUDGET):
        memory_budget()
    monkeypatch.delenv(BUDGET)
    assert memory_budget() > 0


# -- (2) the suggested width fits --------------------------------------------------------------
@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("budget", [1 << 12, 1 << 16, 1 << 20])
def test_suggested_width_fits(monkeypatch, packed, budget):
    rng = np.random.default_rng(budget)
    x = np.zeros((6, 60_000))
    for r in range(6):
        cols = np.sort(rng.choice(60_000, size=int(rng.integers(1, 8)), replace=False))
        x[r, cols] = rng.integers(1, 9, len(cols))
    monkeypatch.setenv(BUDGET, str(budget))
    src = ustc.Tensor.from_dense(x, "CSR")
    fmt = f"(i, j) -> (i : dense, j : delta(1{', packed' if packed else ''}))"
    with pytest.raises(StorageError) as err:
        src.convert(fmt)
    msg = str(err.value)
    b = _number(msg, r"narrowest width that fits is b = (\d+)")
    suggested = re.search(r"(delta\(\d+(?:, packed)?\)) stores", msg).group(1)
    t = src.convert(f"(i, j) -> (i : dense, j : {suggested})")
    np.testing.assert_array_equal(t.to_dense(), x)
    assert t.format.levels[1].type.bits == b
    if b > 1:  # and it is the narrowest: one bit less does not fit
        narrower = suggested.replace(f"({b}", f"({b - 1}")
        if "packed" not in narrower or b - 1 in (1, 2, 4, 8):
            with pytest.raises(StorageError):
                src.convert(f"(i, j) -> (i : dense, j : {narrower})")


# -- (3) under budget: unchanged -----------------------------------------------------------------
FORMATS = [DELTA(b) for b in range(1, 9)] + [DELTA(b) for b in (12, 16, 17, 32)] + \
    [DELTA(b, packed=True) for b in (1, 2, 4, 8)] + \
    ["(i, j) -> (i : dense, j : delta(4))", "(i, j) -> (i : dense, j : delta(4, packed))"]


def _matrices():
    rng = np.random.default_rng(7)
    out = [np.zeros((0, 0)), np.zeros((3, 0)), np.zeros((0, 4)), np.zeros((4, 9)), np.zeros((1, 1)),
           np.ones((1, 1)), np.ones((1, 70)), np.eye(5)]
    for shape, density in [((1, 200), 0.05), ((1, 1000), 0.003), ((7, 300), 0.02), ((30, 40), 0.3),
                           ((50, 2000), 0.001), ((13, 17), 0.9)]:
        x = rng.standard_normal(shape)
        x[rng.random(shape) >= density] = 0
        out.append(x)
    x = np.zeros((3, 5000), dtype=np.float32)
    x[0, 4999] = 1
    x[2, [0, 1, 2, 3000]] = 2
    out.append(x)
    return out


@pytest.mark.parametrize("fmt", FORMATS, ids=str)
def test_unchanged_under_budget(fmt):
    for x in _matrices():
        t = ustc.Tensor.from_dense(x, fmt)
        np.testing.assert_array_equal(t.to_dense(), x)
        assert t.to_dense().dtype == x.dtype
        c = ustc.Tensor.from_dense(x, "CSR").convert(fmt)
        np.testing.assert_array_equal(c.to_dense(), x)
        for name in ("pos", "crd"):
            a, b = t.buffers[(1, name)], c.buffers[(1, name)]
            assert a.dtype == b.dtype and np.array_equal(a, b)
        t.validate()


def test_layout_example():
    """The module docstring's example: delta(2) row [1 at 0, 2 at 15] stores gaps [0, 3, 3, 3, 2]."""
    x = np.zeros((1, 16))
    x[0, 0], x[0, 15] = 1, 2
    t = ustc.Tensor.from_dense(x, DELTA(2))
    assert t.buffers[(1, "crd")].tolist() == [0, 3, 3, 3, 2]
    assert t.buffers[(1, "pos")].tolist() == [0, 5]
    assert t.values.tolist() == [1, 0, 0, 0, 2]
    p = ustc.Tensor.from_dense(x, DELTA(2, packed=True))
    assert p.buffers[(1, "crd")].tolist() == [0 | 3 << 2 | 3 << 4 | 3 << 6 | 2 << 8]


def test_counts_do_not_overflow(monkeypatch):
    """Gaps near 2**62 in several rows: the padded count passes 2**63 and is still reported exactly."""
    monkeypatch.delenv(BUDGET, raising=False)
    n = 1 << 62
    rows = np.arange(4, dtype=np.int64)
    cols = np.full(4, n - 1, dtype=np.int64)
    src = ustc.Tensor.from_coo((rows, cols), np.ones(4), (4, n), "CSR")
    want = 4 * (((n - 1) >> 1) + 1)
    assert want > np.iinfo(np.int64).max
    with pytest.raises(StorageError) as err:
        src.convert(DELTA(1))
    msg = str(err.value)
    assert f"{want:,} entries" in msg
    assert "no delta width fits" in msg  # even 32-bit gaps need ~2**30 padding entries per row ...
    monkeypatch.setenv(BUDGET, str(1 << 40))  # ... unless the budget allows them
    count = {b: 4 * (((n - 1) >> b) + 1) for b in range(1, 33)}
    b = min(b for b in range(1, 33) if Delta(bits=b).storage_bytes(count[b], 8) <= 1 << 40)
    with pytest.raises(StorageError, match=f"narrowest width that fits is b = {b}: delta\\({b}\\) "
                                           f"stores {count[b]:,} entries"):
        src.convert(DELTA(1))
