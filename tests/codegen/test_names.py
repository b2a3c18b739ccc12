"""Generated names never collide: fresh names for everything the compiler invents, and a clear
refusal when two user names would spell one parameter."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from ustc.codegen.names import FreshNames
from ustc.errors import KernelError


def _csr(m, n, seed, density=0.3):
    return sp.random(m, n, density=density, format="csr", random_state=seed)


def test_fresh_names_are_unique_and_stable():
    names = FreshNames(reserved={"A_p1", "i"})
    a = names(("p", 0, 1), "A_p1")
    b = names(("p", 1, 1), "A_p1")
    assert len({a, b, "A_p1"}) == 3
    assert names(("p", 0, 1), "anything") == a          # same key, same name
    assert names("x", "np") != "np"                     # builtins the module uses are reserved
    assert "A_p1" in names and a in names


def test_a_tensor_named_like_a_repeated_access_prefix():
    """A is read twice (its accesses were once prefixed A_0 and A_2) beside a tensor A_0: two
    cursors were both A_0_p1 and the kernel returned wrong numbers."""
    @ustc.jit
    def k(y, A, A_0):
        y[i] += A[i, j] * A_0[i, j] * A[i, j]

    a, b = _csr(30, 20, 1), _csr(30, 20, 2)
    y = k(np.zeros(30), ustc.Tensor.from_package(a), ustc.Tensor.from_package(b))
    np.testing.assert_allclose(y, (a.toarray() * b.toarray() * a.toarray()).sum(axis=1), rtol=1e-12)


@pytest.mark.parametrize("fmt", ["CSR", "COO", "DIAI", "BSR(2, 2)"])
def test_user_indices_spelled_like_generated_variables(fmt):
    """Indices named like a cursor position and the unrolled loop's variables (A_p1, j_2)."""
    @ustc.jit
    def k(y, A, x):
        y[A_p1] += A[A_p1, j_2] * x[j_2]

    a = _csr(40, 24, 3)
    x = np.arange(24.0)
    y = k(np.zeros(40), ustc.Tensor.from_package(a).convert(fmt), x)
    np.testing.assert_allclose(y, a @ x, rtol=1e-12)


def test_a_user_name_that_spells_a_parameter_is_refused():
    @ustc.jit
    def k(y, A, A_vals):
        y[i] += A[i, j] * A_vals[j]

    a = ustc.Tensor.from_package(_csr(5, 4, 4))
    with pytest.raises(KernelError, match="A_vals"):
        k(np.zeros(5), a, np.ones(4))


def test_the_kernel_fingerprint_covers_level_modules_and_the_batch_layout(monkeypatch):
    """A changed level type (its read hooks write kernel code) or batch layout is a new compiler."""
    from pathlib import Path

    from ustc.cache import _key

    read = Path.read_bytes
    _key.compiler_fingerprint.cache_clear()
    before = _key.compiler_fingerprint()
    try:
        for changed in ("delta.py", "batch.py", "compressed.py", "emit_cuda.py", "runtime.py"):
            monkeypatch.setattr(Path, "read_bytes",
                                lambda self, name=changed: read(self) + (b"#" if self.name == name else b""))
            _key.compiler_fingerprint.cache_clear()
            assert _key.compiler_fingerprint() != before, changed
    finally:
        monkeypatch.undo()
        _key.compiler_fingerprint.cache_clear()
    assert _key.compiler_fingerprint() == before


def test_an_index_spelled_like_the_prange_variable():
    """The CPU emitter walks a parallel loop over ``v`` with an unsigned ``v_u`` (CSR SpMV: the
    loop over the balanced row chunks ``i_chunk``); a user index named ``i_chunk_u`` inside it must
    not be overwritten by that loop."""
    @ustc.jit
    def k(y, A, x):
        y[i] += A[i, i_chunk_u] * x[i_chunk_u]

    a = _csr(800, 900, 5, density=0.6)  # large enough for the parallel kernel, not the serial twin
    x = np.arange(900.0)
    y = k(np.zeros(800), ustc.Tensor.from_package(a), x)
    np.testing.assert_allclose(y, a @ x, rtol=1e-12)
    source = k.inspect_source(np.zeros(800), ustc.Tensor.from_package(a), x)
    assert "for i_chunk_u_2 in prange(" in source
