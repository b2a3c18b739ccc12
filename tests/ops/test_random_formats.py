"""Operations on operands in random formats from the Hypothesis strategy ``strategies.formats``.

Every example is a new kernel (half a second to several seconds to compile: an example of
the co-iteration test compiles about 7 CPU s of kernels), so the example counts are small (the
CI run draws the same examples every time); scale them with ``$USTC_TEST_SCALE`` (e.g. 20) for a
longer fuzzing run.
"""

from __future__ import annotations

import string

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import ustc
from op_helpers import assert_matches, assert_unchanged, rand_dense, representable, snapshot, structured_fit
from strategies import examples, formats
from ustc import Tensor

DTYPES = st.sampled_from([np.float64, np.float64, np.float32, np.int64])


@st.composite
def operand(draw, fmt, shape=None, dtype=None):
    """A random tensor in ``fmt`` (all-zero in some examples), or a rejected example when
    ``fmt`` cannot hold the pattern (a unique level heading a singleton region)."""
    shape = shape or tuple(draw(st.lists(st.integers(0, 6), min_size=fmt.ndim, max_size=fmt.ndim)))
    dtype = dtype or draw(DTYPES)
    density = draw(st.sampled_from([0.0, 0.3, 0.7]))
    x = rand_dense(shape, dtype, density=density, seed=draw(st.integers(0, 2**32 - 1)))
    if density == 0.0:
        x[...] = 0
    x = structured_fit(x, fmt)
    assume(representable(x, fmt))
    try:
        return Tensor.from_dense(x, fmt)
    except ustc.StorageError:
        assume(fmt.pos_width or fmt.crd_width)  # a narrow index width may not hold the extents
        raise


def random_formats(max_rank: int, **kwargs):
    return formats(max_rank=max_rank, **kwargs)


def _matrices():
    return random_formats(2).filter(lambda f: f.ndim == 2)


@settings(max_examples=examples(6), deadline=None)
@given(st.data())
def test_spmv_spmm_random_format(data):
    A = data.draw(operand(data.draw(_matrices())))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x, B = rng.integers(-3, 4, A.shape[1]).astype(A.dtype), rng.standard_normal((A.shape[1], 2))
    before = snapshot(A, x, B)
    dense = A.to_dense()
    assert_matches(ustc.matmul(A, x), dense @ x, A.dtype)
    assert_matches(A @ B, dense @ B, np.result_type(A.dtype, B.dtype))
    assert_unchanged([A, x, B], before)


@settings(max_examples=examples(5), deadline=None)
@given(st.data())
def test_add_mul_sum_random_formats(data):
    """A + B and A * B with both operands in (independently) random formats, any rank 1-3."""
    fa = data.draw(random_formats(3))
    fb = data.draw(random_formats(3).filter(lambda f: f.ndim == fa.ndim))
    A = data.draw(operand(fa))
    B = data.draw(operand(fb, A.shape, A.dtype))
    a, b = A.to_dense(), B.to_dense()
    assert_matches(A + B, a + b, A.dtype)
    assert_matches(A * B, a * b, A.dtype)
    axis = data.draw(st.integers(0, fa.ndim - 1))
    assert_matches(A.sum(axis), a.sum(axis=axis), A.dtype)


@settings(max_examples=examples(5), deadline=None)
@given(st.data())
def test_mttkrp_random_3d_format(data):
    fmt = data.draw(random_formats(3).filter(lambda f: f.ndim == 3))
    T = data.draw(operand(fmt, dtype=np.float64))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    C, D = rng.standard_normal((T.shape[1], 3)), rng.standard_normal((T.shape[2], 3))
    got = ustc.einsum("ikl,kj,lj->ij", T, C, D)
    assert_matches(got, np.einsum("ikl,kj,lj->ij", T.to_dense(), C, D))


@settings(max_examples=examples(8), deadline=None)
@given(st.data())
def test_einsum_sparse_output_in_random_format(data):
    """out[...] = A[...] * X[...] stored in a random output format holding A's pattern."""
    fa = data.draw(random_formats(3, allow_structured=False))
    fo = data.draw(random_formats(3, allow_structured=False).filter(lambda f: f.ndim == fa.ndim))
    A = data.draw(operand(fa, dtype=np.float64))
    assume(representable(A.to_dense(), fo))
    X = np.random.default_rng(data.draw(st.integers(0, 2**16))).standard_normal(A.shape)
    idx = string.ascii_lowercase[:fa.ndim]
    C = ustc.einsum(f"{idx},{idx}->{idx}", A, X, out_format=fo)
    assert isinstance(C, Tensor) and C.format == fo
    C.validate()
    assert_matches(C, A.to_dense() * X)


@ustc.jit
def three_way(C, A, B, D):
    C[i, j] = A[i, j] + B[i, j] - D[i, j]


@ustc.jit
def product_plus(C, A, B, D):
    C[i, j] = A[i, j] * B[i, j] + D[i, j]


@ustc.jit
def product_of_sum(C, A, B, D):
    C[i, j] = A[i, j] * (B[i, j] + D[i, j])


@ustc.jit
def four_way(C, A, B, D, E):
    C[i, j] = A[i, j] + B[i, j] * 2 + D[i, j] + E[i, j]  # past SPLIT_ITERATORS: one sentinel loop


LATTICES = {"A + B - D": (three_way, lambda a, b, d, e: a + b - d),
            "A * B + D": (product_plus, lambda a, b, d, e: a * b + d),
            "A * (B + D)": (product_of_sum, lambda a, b, d, e: a * (b + d)),
            "A + 2B + D + E": (four_way, lambda a, b, d, e: a + 2 * b + d + e)}


@settings(max_examples=examples(4), deadline=None)
@given(st.data())
def test_co_iteration_lattices_random_formats(data):
    """Unions, intersections and mixes of three or four matrices in random formats (deduplicated
    and delta levels included), into a dense or a CSR output: one loop per lattice point, or one
    sentinel loop past three operands."""
    name = data.draw(st.sampled_from(sorted(LATTICES)))
    kernel, oracle = LATTICES[name]
    fmts = [data.draw(_matrices()) for _ in range(4)]
    A = data.draw(operand(fmts[0], dtype=np.float64))
    others = [data.draw(operand(f, A.shape, np.float64)) for f in fmts[1:]]
    dense = [t.to_dense() for t in (A, *others)]
    before = snapshot(A, *others)
    args = others if kernel is four_way else others[:2]
    if data.draw(st.booleans()):
        C = kernel("CSR", A, *args)
        C.validate()
    else:
        C = np.zeros(A.shape)
        kernel(C, A, *args)
    assert_matches(C, oracle(*dense), np.float64)
    assert_unchanged([A, *others], before)


def test_strategy_formats_are_used_in_every_rank():
    """Guard: the filters above can be satisfied (the strategy draws ranks 1 to max_rank)."""
    ranks = set()

    @settings(max_examples=30, deadline=None, database=None)
    @given(formats(max_rank=3))
    def collect(fmt):
        ranks.add(fmt.ndim)

    collect()
    assert ranks == {1, 2, 3}
