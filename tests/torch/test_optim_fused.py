"""torch.optim's fused kernels (``fused=True``: Adam, AdamW, SGD, Adagrad) on TorchUST weights, against the same
fused optimizer on the dense masked model (ustc.torch.fused); CSR and BSR(4, 4), whose blocks store zeros
that must stay zero. (The for-loop and foreach paths: test_optim.py.)"""

from __future__ import annotations

import pytest
import torch

import ustc
import ustc.torch
from ustc import ShapeError, formats
from ustc.torch import TorchUST

from masked_training import masked_pair, train_side_by_side

OPTIMIZERS = [("Adam", dict(lr=0.01, weight_decay=0.01, amsgrad=True)), ("AdamW", dict(lr=0.01, weight_decay=0.1)),
              ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
              ("Adagrad", dict(lr=0.1, initial_accumulator_value=0.1))]


@pytest.mark.parametrize("fmt", [formats.CSR, formats.BSR(4, 4)], ids=["CSR", "BSR(4, 4)"])
@pytest.mark.parametrize("name,options", OPTIMIZERS, ids=[name for name, _ in OPTIMIZERS])
def test_fused_optimizer_matches_the_dense_masked_model(name, options, fmt):
    sparse, dense, masks = masked_pair(fmt)
    make = getattr(torch.optim, name)
    opt_s, opt_d = make(sparse.parameters(), fused=True, **options), make(dense.parameters(), fused=True, **options)
    # the first step on dense state, the others on state at the pattern
    train_side_by_side(sparse, dense, masks, opt_s, opt_d, 4)
    assert any(isinstance(v, TorchUST) for v in opt_s.state[sparse[0].weight].values())


def test_fused_state_of_another_shape_or_pattern_is_refused_clearly():
    sparse, _, masks = masked_pair(formats.CSR)
    opt = torch.optim.Adam(sparse.parameters(), lr=0.01, fused=True)
    x = torch.randn(5, 16, dtype=torch.float64)
    sparse(x).square().sum().backward()
    opt.step()
    weight = sparse[0].weight
    state = opt.state[weight]
    assert isinstance(state["exp_avg"], TorchUST)
    kept = weight.detach().to_dense().clone()
    other = TorchUST(ustc.Tensor.from_dense(torch.ones_like(kept).numpy(), formats.CSR))  # every slot stored
    for bad, what in ((torch.zeros(3, 3, dtype=torch.float64), "shape"), (other, "pattern")):
        state["exp_avg"] = bad
        with pytest.raises(ShapeError, match=what):
            opt.step()
        torch.testing.assert_close(weight.detach().to_dense(), kept)  # nothing written on refusal
