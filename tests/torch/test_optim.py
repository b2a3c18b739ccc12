"""Every element-wise ``torch.optim`` optimizer and ``clip_grad_norm_`` on TorchUST weights, against the dense
masked model (LBFGS, Muon and SparseAdam: test_optim_matrix.py; Rprop: test_masked_put.py).

The oracle is the same model kept dense, its gradients masked to the pruning
pattern and the mask re-applied after every step (what ``torch.nn.utils.prune``
training does). The TorchUST model must give the same weights after every step
and keep its pattern, also for BSR(4, 4), whose blocks store explicit zeros.
"""

from __future__ import annotations

import pytest
import torch

import ustc
import ustc.torch
from ustc import formats
from ustc.torch import TorchUST

from masked_training import TOL, assert_matches_masked, backward, masked_pair, train_side_by_side

STEPS = 7  # RAdam's rectified update starts at step 6

OPTIMIZERS = [
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True)),
    ("SGD", dict(lr=0.1, momentum=0.5, dampening=0.1)),
    ("Adam", dict(lr=0.01, weight_decay=0.01)),
    ("Adam", dict(lr=0.01, amsgrad=True)),
    ("AdamW", dict(lr=0.01, weight_decay=0.1)),
    ("RMSprop", dict(lr=0.01, momentum=0.5, centered=True, weight_decay=0.01)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1)),
    ("NAdam", dict(lr=0.01, weight_decay=0.01, decoupled_weight_decay=True)),
    ("RAdam", dict(lr=0.01, weight_decay=0.01)),
    ("Adadelta", dict(lr=1.0, weight_decay=0.01)),
    ("Adamax", dict(lr=0.01, weight_decay=0.01)),
    ("ASGD", dict(lr=0.01, t0=2, lambd=0.01, weight_decay=0.01)),  # averaging (ax) from step 3
    ("Adafactor", dict(lr=0.01, weight_decay=0.01)),  # row / column factored variance of 2-D weights
]
FORMATS = {"CSR": formats.CSR, "BSR(4, 4)": formats.BSR(4, 4)}


@pytest.mark.parametrize("foreach", [False, True, None], ids=["for-loop", "foreach", "default"])
@pytest.mark.parametrize("fmt", FORMATS.values(), ids=FORMATS.keys())
@pytest.mark.parametrize("name,options", OPTIMIZERS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(OPTIMIZERS)])
def test_optimizer_matches_the_dense_masked_model(name, options, fmt, foreach):
    sparse, dense, masks = masked_pair(fmt)
    make = getattr(torch.optim, name)
    opt_sparse, opt_dense = make(sparse.parameters(), foreach=foreach, **options), \
        make(dense.parameters(), foreach=foreach, **options)
    train_side_by_side(sparse, dense, masks, opt_sparse, opt_dense, STEPS)


def test_block_formats_store_zeros_that_training_must_keep():
    sparse, _, masks = masked_pair(formats.BSR(4, 4))
    assert sparse[0].weight.nse > int(masks[0].sum())  # the invariant above is not vacuous


def test_default_reformat_structured_padding_stays_zero():
    """2:4 blocks with fewer than two nonzeros store padding zeros; Adam must leave them 0."""
    torch.manual_seed(2)
    sparse = torch.nn.Linear(16, 8).double()
    ustc.torch.prune_model(sparse, method="2:4")
    with torch.no_grad():
        sparse.weight[0, :4] = 0  # a block of 4 without nonzeros
        sparse.weight[1, 4:8] = torch.tensor([0.0, 0.5, 0.0, 0.0], dtype=torch.float64)  # and one with 1
    dense = torch.nn.Linear(16, 8).double()
    dense.load_state_dict(sparse.state_dict())
    mask = sparse.weight.detach() != 0
    summary = ustc.torch.reformat_model(sparse)
    assert summary.layers[0].format == "Structured(2, 4)" and sparse.weight.nse > int(mask.sum())
    opt_sparse, opt_dense = torch.optim.Adam(sparse.parameters(), lr=0.05), torch.optim.Adam(dense.parameters(),
                                                                                            lr=0.05)
    x, target = torch.randn(6, 16, dtype=torch.float64), torch.randn(6, 8, dtype=torch.float64)
    for _ in range(4):
        for model, opt in ((sparse, opt_sparse), (dense, opt_dense)):
            opt.zero_grad()
            backward(model, x, target)
        dense.weight.grad.mul_(mask)
        opt_sparse.step()
        opt_dense.step()
        with torch.no_grad():
            dense.weight.mul_(mask)
    got = sparse.weight.detach().to_dense()
    assert not got[~mask].any()
    torch.testing.assert_close(got, dense.weight.detach(), **TOL)


@pytest.mark.parametrize("foreach", [None, True, False], ids=["default", "foreach", "for-loop"])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
def test_clip_grad_norm(norm_type, foreach):
    sparse, dense, masks = masked_pair(formats.BSR(4, 4), seed=3)
    x, target = torch.randn(5, 16, dtype=torch.float64), torch.randn(5, 8, dtype=torch.float64) * 10
    for model in (sparse, dense):
        backward(model, x, target)
    for i, mask in masks.items():
        dense[i].weight.grad.mul_(mask)
    got = torch.nn.utils.clip_grad_norm_(sparse.parameters(), 0.05, norm_type=norm_type, foreach=foreach)
    want = torch.nn.utils.clip_grad_norm_(dense.parameters(), 0.05, norm_type=norm_type, foreach=foreach)
    torch.testing.assert_close(got, want, **TOL)
    assert float(want) > 0.05  # the gradients were clipped
    for i in masks:
        assert isinstance(sparse[i].weight.grad, TorchUST)
        torch.testing.assert_close(sparse[i].weight.grad.to_dense(), dense[i].weight.grad, **TOL)
