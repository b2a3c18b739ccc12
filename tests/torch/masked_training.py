"""The dense masked model as the oracle of sparse training (imported as ``masked_training`` by the optimizer
tests): one pruned MLP kept twice, the TorchUST one trained as is, the dense one with its gradients masked to the
pruning pattern and the mask re-applied after every step (what ``torch.nn.utils.prune`` training does)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import ustc  # noqa: E402
import ustc.torch  # noqa: E402
from ustc.torch import TorchUST  # noqa: E402

TOL = dict(rtol=1e-10, atol=1e-12)


def masked_pair(fmt, seed=0):
    """``(sparse model, dense model, masks)``: one pruned float64 16-12-8 MLP twice, the first with its weights
    in ``fmt``; ``masks`` maps each Linear's index to its pruning pattern."""
    torch.manual_seed(seed)
    sparse = torch.nn.Sequential(torch.nn.Linear(16, 12), torch.nn.ReLU(), torch.nn.Linear(12, 8)).double()
    ustc.torch.prune_model(sparse, 0.6)
    dense = torch.nn.Sequential(torch.nn.Linear(16, 12), torch.nn.ReLU(), torch.nn.Linear(12, 8)).double()
    dense.load_state_dict(sparse.state_dict())
    masks = {i: sparse[i].weight.detach() != 0 for i in (0, 2)}
    ustc.torch.reformat_model(sparse, lambda w: TorchUST(ustc.Tensor.from_dense(w, fmt)))
    for i in (0, 2):
        assert isinstance(sparse[i].weight, TorchUST) and torch.equal(sparse[i].weight.pattern_mask(), masks[i])
    return sparse, dense, masks


def backward(model, x, target):
    F.mse_loss(model(x), target).backward()


def assert_matches_masked(sparse, dense, masks):
    """Each sparse weight is still a TorchUST, zero outside its pattern (also in slots stored inside blocks),
    and equals the dense masked model's weight; the biases are equal."""
    for i, mask in masks.items():
        W = sparse[i].weight.detach()
        assert isinstance(W, TorchUST)
        got = W.to_dense()
        assert not got[~mask].any()
        torch.testing.assert_close(got, dense[i].weight.detach(), **TOL)
        torch.testing.assert_close(sparse[i].bias.detach(), dense[i].bias.detach(), **TOL)


def train_side_by_side(sparse, dense, masks, opt_sparse, opt_dense, steps: int) -> None:
    """``steps`` optimizer steps of both models on the same random batches (generator seed 1), the dense model
    masked as the oracle; :func:`assert_matches_masked` after every step."""
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(5, 16, generator=g, dtype=torch.float64)
        target = torch.randn(5, 8, generator=g, dtype=torch.float64)
        for model, opt in ((sparse, opt_sparse), (dense, opt_dense)):
            opt.zero_grad()
            backward(model, x, target)
        for i, mask in masks.items():
            dense[i].weight.grad.mul_(mask)
        opt_sparse.step()
        opt_dense.step()
        with torch.no_grad():
            for i, mask in masks.items():
                dense[i].weight.mul_(mask)
        assert_matches_masked(sparse, dense, masks)
