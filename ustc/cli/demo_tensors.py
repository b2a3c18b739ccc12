"""``ustc demo`` sections about tensors: storage, conversion, interop, sparsification."""

from __future__ import annotations

import numpy as np

from ..tensor import Tensor


def example_matrix() -> np.ndarray:
    """The 4x8 matrix of the design's worked examples."""
    a = np.zeros((4, 8))
    for (r, c), v in zip([(0, 0), (0, 1), (1, 1), (1, 3), (2, 2), (3, 3)], range(1, 7)):
        a[r, c] = v
    return a


def storage() -> list[str]:
    """The same matrix stored in several formats, printed as the UST prints storage."""
    a = example_matrix()
    blocks = ["A (4x8):\n" + "\n".join("  " + " ".join(f"{v:2.0f}" for v in row) for row in a)]
    for name in ("CSR", "BSR(2, 2)", "DIAI", "DELTA(2)"):
        blocks.append(f"A in {name}:\n{Tensor.from_dense(a, name)!r}")
    return blocks


def conversion() -> list[str]:
    """A random matrix converted through a chain of formats and back, checked exactly."""
    rng = np.random.default_rng(7)
    a = np.where(rng.random((6, 9)) < 0.3, rng.integers(1, 9, (6, 9)), 0).astype(np.float32)
    chain = ["COO", "CSR", "CSC", "DCSR", "BSR(2, 3)", "DIAJ", "DELTA(1, packed)", "CSF(2)", "COO"]
    t = Tensor.from_dense(a, chain[0])
    lines = []
    for name in chain[1:]:
        t = t.convert(name)
        lines.append(f"  -> {name:<16} nse {t.nse:3d}  {t.nbytes:4d} bytes  exact: {np.array_equal(t.to_dense(), a)}")
    return ["6x9 float32, 30% nonzeros, converted along a chain:\n" + "\n".join(lines)]


def interop() -> list[str]:
    """Zero-copy views of SciPy and PyTorch objects, and back."""
    import scipy.sparse as sp

    m = sp.random_array((5, 5), density=0.4, format="csr", random_state=1)
    t = Tensor.from_package(m)
    back = t.to_package()
    blocks = [f"SciPy {type(m).__name__} -> {t.format}\n"
              f"  shares memory with the SciPy arrays: {np.shares_memory(t.values, m.data)}, "
              f"back as {type(back).__name__}: {np.shares_memory(back.data, m.data)}"]
    try:
        import torch
    except ImportError:  # torch is optional
        return blocks + ["(PyTorch not installed: pip install 'ustc[torch]')"]
    import warnings

    with warnings.catch_warnings():  # torch marks sparse CSR as beta on every use
        warnings.simplefilter("ignore", UserWarning)
        x = torch.arange(20, dtype=torch.int64).reshape(4, 5).to_sparse_csr()
    u = Tensor.from_package(x)
    blocks.append(f"torch sparse CSR -> {u.format}; same data_ptr: "
                  f"{u.values.data_ptr() == x.values().data_ptr()}\n{u!r}")
    return blocks


def sparsification() -> list[str]:
    """relu straight into a sparse format, without the dense intermediate."""
    from ..tensor.sparsify import sparse_relu

    x = np.linspace(-1, 1, 24).reshape(4, 6).round(2)
    t = sparse_relu(x, "CSC")
    return [f"sparse_relu of a 4x6 ramp in CSC: nse {t.nse}, exact: "
            f"{np.array_equal(t.to_dense(), np.maximum(x, 0))}\n"
            f"  pos[1] = {t.pos(1).tolist()}\n  crd[1] = {t.crd(1).tolist()}"]
