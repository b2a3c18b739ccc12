"""``repr(tensor)`` (design §3 layout), ``get_value`` and ``copy``."""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from ustc import Tensor
from ustc import formats as F

DESIGN_REPR = """\
---- Sparse Tensor<VAL=int64,POS=int64,CRD=int64,DIM=2,LVL=2>
format   : [i, j] -> (i: <LevelFormat.DENSE>, j: <LevelFormat.COMPRESSED>)
device   : cpu
dim      : [4, 5]
lvl      : [4, 5]
nse      : 19
pos[1]   : [0, 4, 9, 14, 19] #5
crd[1]   : [1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4] #19
values   : [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19] #19
data     : 344 bytes
sparsity : 5.00%
----"""


def rows(t) -> dict:
    out = {}
    for line in repr(t).splitlines()[1:-1]:
        key, _, rest = line.partition(": ")
        out[key.strip()] = rest
    return out


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_design_example_exact():
    torch = pytest.importorskip("torch")
    t = Tensor.from_package(torch.arange(20).reshape(4, 5).to_sparse_csr())
    assert repr(t) == DESIGN_REPR


def test_design_example_from_numpy_int64_indices():
    x = np.arange(20, dtype=np.int64).reshape(4, 5)
    t = Tensor.from_dense(x, "(i, j) -> (i : dense, j : compressed), posWidth = 64, crdWidth = 64")
    lines = repr(t).splitlines()
    assert lines[0] == "---- Sparse Tensor<VAL=int64,POS=int64,CRD=int64,DIM=2,LVL=2>"
    assert lines[1] == ("format   : [i, j] -> (i: <LevelFormat.DENSE>, j: <LevelFormat.COMPRESSED>), "
                        "posWidth=64, crdWidth=64")
    assert lines[2:] == DESIGN_REPR.splitlines()[2:]


def test_header_without_index_buffers():
    t = Tensor.from_dense(np.ones((2, 3), dtype=np.float32))
    r = repr(t)
    assert r.splitlines()[0] == "---- Sparse Tensor<VAL=float32,POS=none,CRD=none,DIM=2,LVL=2>"
    assert rows(t)["values"] == "[1.0, 1.0, 1.0, 1.0, 1.0, 1.0] #6"
    assert rows(t)["data"] == "24 bytes"
    assert rows(t)["sparsity"] == "0.00%"
    assert r.endswith("\n----")


def test_long_buffers_elided_in_the_middle():
    x = np.zeros((3, 40))
    x[:, ::2] = np.arange(1, 61).reshape(3, 20)
    t = Tensor.from_dense(x, F.CSR)
    r = rows(t)
    values = r["values"]
    assert values.startswith("[1.0, 2.0, 3.0, ")
    assert values.endswith(", 58.0, 59.0, 60.0] #60")
    assert ", ..., " in values
    assert "30.0" not in values and "31.0" not in values  # the middle is left out
    assert r["crd[1]"].endswith("] #60") and "..." in r["crd[1]"]
    assert r["pos[1]"] == "[0, 20, 40, 60] #4"  # short buffers are printed whole
    assert r["nse"] == "60"
    assert r["dim"] == "[3, 40]" and r["lvl"] == "[3, 40]"
    assert r["data"] == f"{4 * 4 + 60 * 4 + 60 * 8} bytes"
    assert r["sparsity"] == "50.00%"


def test_short_buffer_not_elided():
    x = np.zeros((1, 40))
    x[0, :20] = np.arange(1, 21)
    r = rows(Tensor.from_dense(x, F.CSR))
    assert "..." not in r["crd[1]"]
    assert r["crd[1]"] == "[" + ", ".join(map(str, range(20))) + "] #20"


def test_buffer_order_and_level_labels():
    x = np.zeros((3, 4))
    x[0, 1], x[2, 3] = 1, 2
    lines = repr(Tensor.from_dense(x, F.DCSR)).splitlines()
    labels = [line.split(":")[0].strip() for line in lines[1:-1]]
    assert labels == ["format", "device", "dim", "lvl", "nse", "pos[0]", "crd[0]", "pos[1]", "crd[1]", "values",
                      "data", "sparsity"]
    r = rows(Tensor.from_dense(x, F.DCSR))
    assert r["pos[0]"] == "[0, 2] #2" and r["crd[0]"] == "[0, 2] #2"
    assert r["pos[1]"] == "[0, 1, 2] #3" and r["crd[1]"] == "[1, 3] #2"


def test_data_bytes_and_sparsity_for_padded_formats():
    x = np.ones((3, 3))
    t = Tensor.from_dense(x, F.BSR(2, 2))  # 4 blocks of 4: 16 stored > 9 entries
    r = rows(t)
    assert r["nse"] == "16"
    assert r["sparsity"] == "0.00%"
    assert r["data"] == f"{3 * 4 + 4 * 4 + 16 * 8} bytes"
    d = Tensor.from_dense(np.eye(4, 8), F.DIAI)
    rd = rows(d)
    assert rd["lvl"] == "[11, 4]"
    assert rd["data"] == f"{2 * 4 + 1 * 4 + 4 * 8} bytes"
    assert rd["sparsity"] == "87.50%"


def test_empty_tensor_repr():
    r = rows(Tensor.from_dense(np.zeros((0, 3)), F.CSR))
    assert r["nse"] == "0"
    assert r["crd[1]"] == "[] #0"
    assert r["values"] == "[] #0"
    assert r["sparsity"] == "n/a"


def test_batched_repr_shapes():
    x = np.zeros((2, 2, 3))
    x[0, 0, 1], x[0, 1, 2], x[1, 1, 0] = 1, 2, 3
    r = rows(Tensor.from_dense(x, F.BatchedCSR))
    assert r["pos[2]"] == "[0, 1, 2, 0, 0, 1] #2x3"
    assert r["crd[2]"] == "[1, 2, 0, 0] #2x2"
    assert r["values"] == "[1.0, 2.0, 3.0, 0.0] #2x2"


def test_delta_repr_dtypes():
    x = np.zeros((1, 16))
    x[0, 0], x[0, 15] = 1, 2
    t = Tensor.from_dense(x, F.DELTA(2, True))
    assert repr(t).splitlines()[0] == "---- Sparse Tensor<VAL=float64,POS=int32,CRD=uint32,DIM=2,LVL=2>"
    assert rows(t)["crd[1]"] == "[764] #1"


# --------------------------------------------------------------------------- get_value


def test_get_value_stored_and_unstored():
    rng = np.random.default_rng(0)
    x = np.where(rng.random((5, 6)) < 0.4, rng.integers(1, 9, (5, 6)), 0).astype(np.float64)
    for fmt in (F.CSR, F.CSC, F.COO(), F.DCSR, F.DELTA(2), F.DIAJ):
        t = Tensor.from_dense(x, fmt)
        stored = {(int(i), int(j)) for i, j in zip(*[c.tolist() for c in t.entries()[0]])}
        for i in range(5):
            for j in range(6):
                v = t.get_value(i, j)
                if (i, j) in stored:
                    assert v == x[i, j], (fmt, i, j)
                    assert isinstance(v, float)
                else:
                    assert v is None, (fmt, i, j)
                if x[i, j] != 0:
                    assert v == x[i, j]


def test_get_value_stored_zero_is_not_none():
    x = np.zeros((4, 4))
    x[0, 0] = 3
    t = Tensor.from_dense(x, F.BSR(2, 2))
    assert t.get_value(0, 0) == 3
    assert t.get_value(1, 1) == 0.0  # inside a stored block
    assert t.get_value(3, 3) is None  # no block stored there
    assert Tensor.from_dense(x).get_value(2, 2) == 0.0  # dense stores everything


def test_get_value_duplicates_summed():
    fmt = ustc.TensorFormat.parse("(i, j) -> (i : dense, j : compressed(nonunique))")
    t = Tensor(fmt, (2, 3), {(1, "pos"): np.array([0, 2, 2]), (1, "crd"): np.array([1, 1])},
               np.array([1.5, 2.0]))
    assert t.get_value(0, 1) == 3.5
    assert t.get_value(1, 1) is None


def test_get_value_int_and_complex_types():
    t = Tensor.from_dense(np.array([[0, 7], [0, 0]], dtype=np.int64), F.CSR)
    assert t.get_value(0, 1) == 7 and isinstance(t.get_value(0, 1), int)
    z = Tensor.from_dense(np.array([[0, 1 + 2j]]), F.COO())
    assert z.get_value(0, 1) == 1 + 2j


def test_get_value_bad_coordinates():
    t = Tensor.from_dense(np.eye(3), F.CSR)
    with pytest.raises(IndexError):
        t.get_value(3, 0)
    with pytest.raises(IndexError):
        t.get_value(0, -1)
    with pytest.raises(IndexError):
        t.get_value(0)


# --------------------------------------------------------------------------- copy


@pytest.mark.parametrize("fmt", [F.CSR, F.COO(), F.DIAI, F.DELTA(2, True), F.BSR(2, 2), F.Dense(2),
                                 F.BatchedCSR], ids=lambda f: f.name or str(f))
def test_copy_is_deep(fmt):
    rng = np.random.default_rng(1)
    shape = (2, 4, 4) if fmt == F.BatchedCSR else (4, 4)
    x = np.where(rng.random(shape) < 0.5, rng.integers(1, 9, shape), 0).astype(np.float64)
    t = Tensor.from_dense(x, fmt)
    c = t.copy()
    assert c is not t
    assert c.format == t.format and c.shape == t.shape and c.package == t.package and c.device == t.device
    assert repr(c) == repr(t)
    assert not np.shares_memory(np.asarray(c.values), np.asarray(t.values))
    for key in t.buffers:
        assert not np.shares_memory(np.asarray(c.buffers[key]), np.asarray(t.buffers[key]))
        np.testing.assert_array_equal(c.buffers[key], t.buffers[key])
    np.asarray(c.values)[...] = -1
    for b in c._buffers.values():
        b[...] = 0
    np.testing.assert_array_equal(np.asarray(t.to_dense()), x)
    t.validate()


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_copy_of_package_view_detaches_from_source():
    import scipy.sparse as sp

    s = sp.csr_array(np.eye(3))
    t = Tensor.from_package(s)
    c = t.copy()
    c.values[:] = 9
    np.testing.assert_array_equal(s.toarray(), np.eye(3))
    assert type(c.to_package()) is sp.csr_array
    torch = pytest.importorskip("torch")
    ts = torch.eye(3, dtype=torch.float64).to_sparse_csr()
    tc = Tensor.from_package(ts).copy()
    assert tc.package == "torch"
    assert tc.values.data_ptr() != ts.values().data_ptr()
    tc.values[:] = 5
    assert torch.equal(ts.to_dense(), torch.eye(3, dtype=torch.float64))
