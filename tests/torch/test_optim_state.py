"""Optimizer state of TorchUST parameters kept at their pattern (ustc.torch.optim_state): after a step every
per-element state tensor of a TorchUST parameter is a TorchUST of the parameter's pattern holding the dense
masked model's state at those positions; checkpoints of that state resume training exactly, in a sparse model
and in the dense masked one. (Every optimizer's weights against the dense masked model: test_optim.py.)"""

from __future__ import annotations

import io

import pytest
import torch
import torch.nn.functional as F

import ustc
import ustc.torch
from ustc import formats
from ustc.torch import TorchUST
from ustc.torch.pattern import same_pattern

TOL = dict(rtol=1e-10, atol=1e-12)


def _models(fmt=formats.CSR, seed=0, dtype=torch.float64):
    """``(sparse, dense, masks)``: one pruned MLP, the first with its weights in ``fmt``."""
    torch.manual_seed(seed)
    sparse = torch.nn.Sequential(torch.nn.Linear(16, 12), torch.nn.ReLU(), torch.nn.Linear(12, 8)).to(dtype)
    ustc.torch.prune_model(sparse, 0.6)
    dense = torch.nn.Sequential(torch.nn.Linear(16, 12), torch.nn.ReLU(), torch.nn.Linear(12, 8)).to(dtype)
    dense.load_state_dict(sparse.state_dict())
    masks = {i: sparse[i].weight.detach() != 0 for i in (0, 2)}
    if fmt is None:  # the default formats (bfloat16 values: reformat_model's own conversion)
        ustc.torch.reformat_model(sparse)
    else:
        ustc.torch.reformat_model(sparse, lambda w: TorchUST(ustc.Tensor.from_dense(w, fmt)))
    return sparse, dense, masks


def _data(steps, dtype=torch.float64):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(5, 16, generator=g).to(dtype), torch.randn(5, 8, generator=g).to(dtype))
            for _ in range(steps)]


def _step(model, opt, x, target, masks=None):
    opt.zero_grad()
    F.mse_loss(model(x), target).backward()
    if masks is not None:  # the dense masked model
        for i, mask in masks.items():
            model[i].weight.grad.mul_(mask)
    opt.step()
    if masks is not None:
        with torch.no_grad():
            for i, mask in masks.items():
                model[i].weight.mul_(mask)


@pytest.mark.parametrize("fmt", [formats.CSR, formats.BSR(4, 4)], ids=str)  # BSR: frozen zeros in its blocks
def test_state_is_a_torchust_of_the_pattern_with_the_dense_masked_state(fmt):
    sparse, dense, masks = _models(fmt)
    opt_s = torch.optim.Adam(sparse.parameters(), lr=0.01, amsgrad=True)
    opt_d = torch.optim.Adam(dense.parameters(), lr=0.01, amsgrad=True)
    for x, target in _data(3):
        _step(sparse, opt_s, x, target)
        _step(dense, opt_d, x, target, masks)
    for i, mask in masks.items():
        W = sparse[i].weight
        state, want = opt_s.state[W], opt_d.state[dense[i].weight]
        assert type(state["step"]) is torch.Tensor and state["step"].dim() == 0
        for key in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
            got = state[key]
            assert type(got) is TorchUST and same_pattern(got.ust, W.ust), key
            assert got.stored_values().numel() == W.stored_values().numel()
            dense_got = got.to_dense()
            assert not dense_got[~mask].any()  # nothing outside the pattern, padding slots included
            torch.testing.assert_close(dense_got, want[key] * mask, **TOL)
        assert type(opt_s.state[sparse[i].bias]["exp_avg"]) is torch.Tensor  # dense parameters: as before


def _train(model, opt, data, masks=None):
    for x, target in data:
        _step(model, opt, x, target, masks)


def test_checkpointed_state_resumes_in_sparse_and_in_dense_masked_models():
    data = _data(5)
    sparse, _, masks = _models(seed=2)
    opt = torch.optim.AdamW(sparse.parameters(), lr=0.01, weight_decay=0.1)
    _train(sparse, opt, data[:2])
    buffer = io.BytesIO()
    torch.save({"model": sparse.state_dict(), "opt": opt.state_dict()}, buffer)
    _train(sparse, opt, data[2:])  # uninterrupted

    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    assert type(saved["opt"]["state"][0]["exp_avg"]) is TorchUST
    resumed, dense, _ = _models(seed=2)  # fresh models: the sparse one and the dense masked one
    for model in (resumed, dense):
        model.load_state_dict(saved["model"])
    opt_r = torch.optim.AdamW(resumed.parameters(), lr=0.01, weight_decay=0.1)
    opt_d = torch.optim.AdamW(dense.parameters(), lr=0.01, weight_decay=0.1)
    opt_r.load_state_dict(saved["opt"])
    buffer.seek(0)  # its own copy: load_state_dict keeps the loaded tensors, which the steps update in place
    opt_d.load_state_dict(torch.load(buffer, weights_only=True)["opt"])  # TorchUST state, dense parameters
    _train(resumed, opt_r, data[2:])
    _train(dense, opt_d, data[2:], masks)
    assert type(opt_d.state[dense[0].weight]["exp_avg"]) is torch.Tensor
    for i in (0, 2):
        want = sparse[i].weight.detach().to_dense()
        torch.testing.assert_close(resumed[i].weight.detach().to_dense(), want, **TOL)
        torch.testing.assert_close(dense[i].weight.detach(), want, **TOL)
        torch.testing.assert_close(dense[i].bias.detach(), sparse[i].bias.detach(), **TOL)


def test_bfloat16_weights_keep_bfloat16_state_at_the_pattern():
    sparse, dense, masks = _models(None, seed=3, dtype=torch.bfloat16)
    opt_s = torch.optim.AdamW(sparse.parameters(), lr=0.01)
    opt_d = torch.optim.AdamW(dense.parameters(), lr=0.01)
    for x, target in _data(3, torch.bfloat16):
        _step(sparse, opt_s, x, target)
        _step(dense, opt_d, x, target, masks)
    for i, mask in masks.items():
        got = opt_s.state[sparse[i].weight]["exp_avg_sq"]
        assert type(got) is TorchUST and got.dtype == torch.bfloat16
        torch.testing.assert_close(sparse[i].weight.detach().to_dense(), dense[i].weight.detach(),
                                   rtol=2e-2, atol=2e-2)
