"""``W[mask] = value`` on TorchUSTs (ustc.torch.masked): projected onto the pattern, as every in-place op on a
TorchUST; and torch.optim.Rprop, which runs it on its sign and gradient tensors, against the dense masked model."""

from __future__ import annotations

import pytest
import torch

import ustc
import ustc.torch
from ustc import UnsupportedOperation, formats
from ustc.torch import TorchUST

from masked_training import masked_pair, train_side_by_side
from torch_helpers import random_weight, torch_ust


@pytest.mark.parametrize("fmt", [formats.CSR, formats.BSR(2, 2)], ids=["CSR", "BSR(2, 2)"])
def test_masked_fill_in_place_keeps_the_pattern(fmt):
    T, W = torch_ust(fmt, random_weight((6, 8), density=0.5, seed=5))
    T.freeze_zeros_()
    pattern = T.pattern_mask()
    for mask in (W > 0, T.gt(0)):  # a dense mask, and a TorchUST one of the same pattern
        U = T.clone()
        U[mask] = 2.5
        want = W.clone()
        want[(W > 0) & pattern] = 2.5
        assert isinstance(U, TorchUST)
        torch.testing.assert_close(U.to_dense(), want)
        torch.testing.assert_close(T.to_dense(), W)  # the original untouched
    U = T.clone()
    U[torch.ones(6, 8, dtype=torch.bool)] = 1.0  # outside the pattern stays 0
    torch.testing.assert_close(U.to_dense(), pattern.to(W.dtype))
    with pytest.raises(UnsupportedOperation):
        U[torch.tensor([0, 1])] = 3.0  # integer indices: still refused clearly


@pytest.mark.parametrize("foreach", [False, True], ids=["for-loop", "foreach"])
@pytest.mark.parametrize("fmt", [formats.CSR, formats.BSR(4, 4)], ids=["CSR", "BSR(4, 4)"])
def test_rprop_matches_the_dense_masked_model(fmt, foreach):
    sparse, dense, masks = masked_pair(fmt)
    opt_s = torch.optim.Rprop(sparse.parameters(), lr=0.01, foreach=foreach)
    opt_d = torch.optim.Rprop(dense.parameters(), lr=0.01, foreach=foreach)
    train_side_by_side(sparse, dense, masks, opt_s, opt_d, 5)
