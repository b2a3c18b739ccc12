"""torch.optim's fused kernels (``fused=True``: Adam, AdamW, SGD, Adagrad) on TorchUST weights, against the same
fused optimizer on the dense masked model (ustc.torch.fused); CSR and BSR(4, 4), whose blocks store zeros
that must stay zero. (The for-loop and foreach paths: test_optim.py.)"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ustc
import ustc.torch
from ustc import formats
from ustc.torch import TorchUST

OPTIMIZERS = [("Adam", dict(lr=0.01, weight_decay=0.01, amsgrad=True)), ("AdamW", dict(lr=0.01, weight_decay=0.1)),
              ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
              ("Adagrad", dict(lr=0.1, initial_accumulator_value=0.1))]


def _models(fmt):
    torch.manual_seed(0)
    sparse = torch.nn.Sequential(torch.nn.Linear(16, 12), torch.nn.ReLU(), torch.nn.Linear(12, 8)).double()
    ustc.torch.prune_model(sparse, 0.6)
    dense = torch.nn.Sequential(torch.nn.Linear(16, 12), torch.nn.ReLU(), torch.nn.Linear(12, 8)).double()
    dense.load_state_dict(sparse.state_dict())
    masks = {i: sparse[i].weight.detach() != 0 for i in (0, 2)}
    ustc.torch.reformat_model(sparse, lambda w: TorchUST(ustc.Tensor.from_dense(w, fmt)))
    return sparse, dense, masks


@pytest.mark.parametrize("fmt", [formats.CSR, formats.BSR(4, 4)], ids=["CSR", "BSR(4, 4)"])
@pytest.mark.parametrize("name,options", OPTIMIZERS, ids=[name for name, _ in OPTIMIZERS])
def test_fused_optimizer_matches_the_dense_masked_model(name, options, fmt):
    sparse, dense, masks = _models(fmt)
    make = getattr(torch.optim, name)
    opt_s, opt_d = make(sparse.parameters(), fused=True, **options), make(dense.parameters(), fused=True, **options)
    g = torch.Generator().manual_seed(1)
    for step in range(4):  # the first step on dense state, the others on state at the pattern
        x, target = torch.randn(5, 16, generator=g, dtype=torch.float64), torch.randn(5, 8, generator=g,
                                                                                        dtype=torch.float64)
        for model, opt in ((sparse, opt_s), (dense, opt_d)):
            opt.zero_grad()
            F.mse_loss(model(x), target).backward()
        for i, mask in masks.items():
            dense[i].weight.grad.mul_(mask)
        opt_s.step()
        opt_d.step()
        with torch.no_grad():
            for i, mask in masks.items():
                dense[i].weight.mul_(mask)
        for i, mask in masks.items():
            got = sparse[i].weight.detach()
            assert isinstance(got, TorchUST)
            assert not got.to_dense()[~mask].any()  # stored zeros inside blocks stay zero
            torch.testing.assert_close(got.to_dense(), dense[i].weight.detach(), rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(sparse[i].bias.detach(), dense[i].bias.detach(), rtol=1e-10, atol=1e-12)
    assert any(isinstance(v, TorchUST) for v in opt_s.state[sparse[0].weight].values())
