"""The ``torch.optim`` optimizers whose update is not element-wise, on TorchUST weights, against the dense masked
model (``masked_training``): LBFGS (flat vectors over all parameters, a closure, a line search), Muon (a matrix
function of the whole 2-D momentum) and SparseAdam (torch.sparse gradients only: refused with torch's error).

LBFGS gathers ``p.grad.view(-1)``, which for a TorchUST is its dense flat tensor (0 outside the pattern), and
adds the flat update back through ``view_as(p)`` projected onto the pattern. The dense masked model's flat
gradients are 0 outside the pattern too, and so is every direction LBFGS builds from them (linear
combinations of gradients and steps): the masked-out entries add 0 to every dot product, and both models take
the same steps. Muon's momentum stays dense (``ustc.torch.optim_state.DENSE_STATE``), so its Newton-Schulz
orthogonalisation is the dense one and the weight receives the dense update masked.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ustc import formats
from ustc.torch import TorchUST

from masked_training import TOL, assert_matches_masked, masked_pair, train_side_by_side

FORMATS = {"CSR": formats.CSR, "BSR(4, 4)": formats.BSR(4, 4)}
needs_muon = pytest.mark.skipif(not hasattr(torch.optim, "Muon"), reason="torch.optim.Muon: torch >= 2.9")


def _closure(model, opt, x, target, masks=None):
    """The loss and gradients LBFGS re-evaluates; ``masks``: the dense model's gradients masked (the oracle)."""
    def closure():
        opt.zero_grad()
        loss = F.mse_loss(model(x), target)
        loss.backward()
        for i, mask in (masks or {}).items():
            model[i].weight.grad.mul_(mask)
        return loss
    return closure


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
@pytest.mark.parametrize("fmt", FORMATS.values(), ids=FORMATS.keys())
def test_lbfgs_matches_the_dense_masked_model(fmt, line_search_fn):
    sparse, dense, masks = masked_pair(fmt)
    make = lambda model: torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4, history_size=3,  # noqa: E731
                                           line_search_fn=line_search_fn)
    opt_sparse, opt_dense = make(sparse), make(dense)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        x = torch.randn(5, 16, generator=g, dtype=torch.float64)
        target = torch.randn(5, 8, generator=g, dtype=torch.float64)
        got = opt_sparse.step(_closure(sparse, opt_sparse, x, target))
        want = opt_dense.step(_closure(dense, opt_dense, x, target, masks))
        torch.testing.assert_close(got, want, **TOL)
        assert opt_sparse.state[opt_sparse._params[0]]["func_evals"] == \
            opt_dense.state[opt_dense._params[0]]["func_evals"]  # the same line search
        assert_matches_masked(sparse, dense, masks)  # also: zero outside the pattern inside BSR blocks


@needs_muon
@pytest.mark.parametrize("options", [dict(lr=0.02, weight_decay=0.1), dict(lr=0.05, nesterov=False, momentum=0.8)],
                         ids=["nesterov", "plain"])
@pytest.mark.parametrize("fmt", FORMATS.values(), ids=FORMATS.keys())
def test_muon_matches_the_dense_masked_model(fmt, options):
    sparse, dense, masks = masked_pair(fmt)
    opt_sparse, opt_dense = (torch.optim.Muon([model[i].weight for i in masks], **options) for model in (sparse,
                                                                                                         dense))
    train_side_by_side(sparse, dense, masks, opt_sparse, opt_dense, 4)
    for i in masks:
        assert type(opt_sparse.state[sparse[i].weight]["momentum_buffer"]) is torch.Tensor  # kept dense


@needs_muon
def test_muon_densifies_pattern_state():
    """A TorchUST momentum (an optimizer state_dict saved by a version keeping it at the pattern) is made
    dense before the step, which then matches the dense masked model."""
    sparse, dense, masks = masked_pair(formats.BSR(4, 4), seed=2)
    opt_sparse, opt_dense = (torch.optim.Muon([model[i].weight for i in masks], lr=0.02) for model in (sparse,
                                                                                                       dense))
    train_side_by_side(sparse, dense, masks, opt_sparse, opt_dense, 1)
    for i in masks:
        state = opt_sparse.state[sparse[i].weight]
        at_pattern = sparse[i].weight.detach().clone()
        at_pattern.copy_(state["momentum_buffer"])  # the dense state read at the weight's pattern
        state["momentum_buffer"] = at_pattern
    train_side_by_side(sparse, dense, masks, opt_sparse, opt_dense, 2)


def test_sparse_adam_refuses_torch_ust_gradients():
    """SparseAdam takes torch.sparse (COO layout) gradients; a TorchUST's gradient is a strided-layout TorchUST.
    torch's error names the cause and the fix (Adam, which on a TorchUST updates only the stored values)."""
    sparse, _, _ = masked_pair(formats.CSR)
    before = sparse[0].weight.detach().to_dense()
    opt = torch.optim.SparseAdam(list(sparse.parameters()), lr=0.01)
    F.mse_loss(sparse(torch.ones(2, 16, dtype=torch.float64)), torch.zeros(2, 8, dtype=torch.float64)).backward()
    assert isinstance(sparse[0].weight.grad, TorchUST)
    with pytest.raises(RuntimeError, match="SparseAdam does not support dense gradients, please consider Adam"):
        opt.step()
    assert torch.equal(sparse[0].weight.detach().to_dense(), before)
