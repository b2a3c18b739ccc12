"""ustc.prune: hand-computed metrics, n:m properties (Hypothesis), formats, torch inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ustc
from ustc import formats, prune


def test_prune_24_magnitude_by_hand():
    w = np.array([[1.0, -4, 2, 3, 0.5, 0, -1, 2]])
    before = w.copy()
    pruned, m = prune.prune_24_magnitude(w)
    assert np.array_equal(w, before)  # the input is not touched
    assert pruned.format == formats.Structured(2, 4)
    assert prune.decompress(pruned).tolist() == [[0, -4, 0, 3, 0, 0, -1, 2]]
    assert (m.pruned_count, m.total_count) == (4, 8)
    assert m.kept_magnitude_mean == pytest.approx((4 + 3 + 1 + 2) / 4)
    assert m.pruned_magnitude_mean == pytest.approx((1 + 2 + 0.5 + 0) / 4)
    total = 1 + 16 + 4 + 9 + 0.25 + 0 + 1 + 4
    assert m.approximation_error == pytest.approx(math.sqrt(1 + 4 + 0.25) / math.sqrt(total))
    assert m.sparsity == 0.5


def test_prune_24_gradient_keeps_largest_products():
    w = np.array([[1.0, 2.0, 3.0, 4.0]])
    g = np.array([[10.0, 1.0, 0.1, 1.0]])  # |w*g| = 10, 2, 0.3, 4
    pruned, m = prune.prune_24_gradient(w, g)
    assert prune.decompress(pruned).tolist() == [[1.0, 0, 0, 4.0]]
    assert m.pruned_count == 2
    with pytest.raises(ustc.ShapeError):
        prune.prune_24_gradient(w, g[:, :2])


def test_prune_magnitude_by_hand():
    w = np.array([[0.1, -5.0, 0.2], [3.0, -0.05, 1.0]])
    pruned, m = prune.prune_magnitude(w, 0.5)
    assert pruned.format == formats.CSR
    assert prune.decompress(pruned).tolist() == [[0, -5.0, 0], [3.0, 0, 1.0]]
    assert m.pruned_count == 3 and m.kept_magnitude_mean == pytest.approx(3.0)
    assert m.pruned_magnitude_mean == pytest.approx((0.1 + 0.2 + 0.05) / 3)
    assert prune.prune_magnitude(w, 0.0).metrics.pruned_count == 0
    assert prune.prune_magnitude(w, 1.0).metrics.approximation_error == pytest.approx(1.0)
    assert prune.prune_magnitude(np.arange(4.0), 0.5).tensor.ndim == 1
    with pytest.raises(ValueError):
        prune.prune_magnitude(w, 1.5)


def test_formats_ragged_blocks_and_errors():
    w = np.arange(1.0, 11.0).reshape(2, 5)  # the last block holds one column
    pruned, _ = prune.prune_nm(w, 2, 4)
    assert prune.decompress(pruned).tolist() == [[0, 0, 3, 4, 5], [0, 0, 8, 9, 10]]
    csr, _ = prune.prune_nm(w, 1, 2, tensor_format="CSR")
    assert csr.format == formats.CSR and csr.nse == 6
    with pytest.raises(ustc.ShapeError, match="tensor_format"):
        prune.prune_nm(np.ones((2, 2, 4)), 2, 4)
    with pytest.raises(ValueError):
        prune.prune_nm(w, 5, 4)
    with pytest.raises(ValueError, match="by must be"):
        prune.prune_nm(w, 2, 4, by="random")
    assert prune.prune_nm(w, 2, 4, by=lambda a: -np.abs(a)).tensor.to_dense()[0, 0] == 1.0
    with pytest.raises(TypeError):
        prune.decompress(w)


def test_matmul_on_the_structured_result():
    rng = np.random.default_rng(0)
    w, x = rng.standard_normal((6, 8)), rng.standard_normal((8, 3))
    pruned, _ = prune.prune_24_magnitude(w)
    np.testing.assert_allclose(ustc.matmul(pruned, x), prune.decompress(pruned) @ x)


def test_torch_inputs_give_torch_outputs():
    torch = pytest.importorskip("torch")
    w = torch.randn(4, 8)
    before = w.clone()
    pruned, m = prune.prune_24_magnitude(w)
    dense = prune.decompress(pruned)
    assert isinstance(dense, torch.Tensor) and torch.equal(w, before)
    assert int((dense != 0).sum()) == 16 and m.total_count == 32


blocks = st.integers(1, 4).flatmap(lambda m: st.tuples(st.integers(0, m), st.just(m)))


@settings(max_examples=60)
@given(nm=blocks, w=hnp.arrays(np.float64, hnp.array_shapes(min_dims=2, max_dims=2, max_side=9),
                                elements=st.floats(-100, 100, allow_nan=False)), use_scores=st.booleans())
def test_prune_nm_properties(nm, w, use_scores):
    n, m = nm
    scores = np.abs(np.sin(w * 3.7)) if use_scores else np.abs(w)
    keep = prune.nm_mask(scores, n, m)
    cols = w.shape[1]
    for start in range(0, cols, m):
        block_keep, block_scores = keep[:, start:start + m], scores[:, start:start + m]
        assert (block_keep.sum(1) == min(n, block_keep.shape[1])).all()  # exactly n kept per block
        for row_keep, row_scores in zip(block_keep, block_scores):
            if row_keep.any() and (~row_keep).any():  # every kept score >= every pruned one
                assert row_scores[row_keep].min() >= row_scores[~row_keep].max()
    pruned, metrics = prune.prune_nm(w, n, m, by=scores)
    dense = prune.decompress(pruned)
    assert np.array_equal(dense, np.where(keep, w, 0))
    assert metrics.pruned_count == int((~keep).sum()) and metrics.total_count == w.size
    assert 0.0 <= metrics.approximation_error <= 1.0 + 1e-12


def test_global_magnitude_masks_by_hand():
    small = np.array([[0.1, -0.2], [0.3, 0.05]])
    large = np.array([4.0, -1.0, 0.0, 2.0, 3.0])
    masks = prune.global_magnitude_masks([small, large], 0.5)  # 4 (round(3.5)) of 9 go, ranked together
    assert [m.shape for m in masks] == [(2, 2), (5,)]
    assert masks[0].tolist() == [[False, False], [True, False]]  # 0.05, 0.1, 0.2 of the small one go
    assert masks[1].tolist() == [True, True, False, True, True]  # and the 0 of the large one
    ties = prune.global_magnitude_masks([np.ones(3), np.ones(2)], 0.4)  # ties: lower index first, arrays in order
    assert ties[0].tolist() == [False, False, True] and ties[1].tolist() == [True, True]
    assert prune.global_magnitude_masks([], 0.3) == []
    with pytest.raises(ValueError, match="amount"):
        prune.global_magnitude_masks([small], -0.1)


@settings(max_examples=30, deadline=None)
@given(st.lists(hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=2, max_side=5),
                           elements=st.floats(-10, 10)), min_size=1, max_size=4),
       st.floats(0, 1))
def test_global_magnitude_masks_properties(ws, amount):
    masks = prune.global_magnitude_masks(ws, amount)
    total = sum(w.size for w in ws)
    assert sum(int((~m).sum()) for m in masks) == int(round(amount * total))
    kept = [abs(x) for w, m in zip(ws, masks) for x in w[m]]
    gone = [abs(x) for w, m in zip(ws, masks) for x in w[~m]]
    assert not kept or not gone or min(kept) >= max(gone)  # one threshold for all arrays
