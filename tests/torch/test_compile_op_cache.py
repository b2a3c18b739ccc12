"""The ustc::linear / ustc::sparse_mm CPU kernels and their weight cache (no torch.compile needed).

The compiled graph calls the ops with a TorchUST's buffers; the op rebuilds the weight once per values
tensor (``compiled._weight``) and must miss whenever the buffers, format text, shape or values differ,
forget a values tensor that died, and return new tensors equal to the dense product.
"""

from __future__ import annotations

import gc

import torch
import torch.nn.functional as F

from ustc.torch import TorchUST, compiled


def _weight(seed=0, shape=(6, 5)):
    torch.manual_seed(seed)
    dense = torch.randn(shape) * (torch.rand(shape) < 0.4)
    return TorchUST.from_torch(dense, "CSR"), dense


def _args(w):
    return w.signature, list(w.shape), list(w.buffer_tensors), w.stored_values()


def test_ops_dispatch_to_the_cpu_kernels_and_return_new_tensors():
    for op in ("ustc::linear", "ustc::sparse_mm"):  # a CPU kernel of its own, not custom_op's composite one
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op, "CPU")
    w, dense = _weight()
    x, bias = torch.randn(2, 5), torch.randn(6)
    with torch.inference_mode():
        for xs in (x[:1], x, x[0]):
            out = torch.ops.ustc.linear.default(*_args(w), xs, bias)
            torch.testing.assert_close(out, F.linear(xs, dense, bias))
            assert out.data_ptr() not in (xs.data_ptr(), bias.data_ptr())
        torch.testing.assert_close(torch.ops.ustc.linear.default(*_args(w), x, None), x @ dense.t())
        other = torch.randn(5, 3)
        torch.testing.assert_close(torch.ops.ustc.sparse_mm.default(*_args(w), other, True), dense @ other)
        left = torch.randn(4, 6)
        torch.testing.assert_close(torch.ops.ustc.sparse_mm.default(*_args(w), left, False), left @ dense)


def test_weight_cache_hits_only_the_same_buffers_and_forgets_dead_values():
    w, _ = _weight()
    sig, shape, buffers, values = _args(w)
    first = compiled._weight(sig, shape, buffers, values)
    assert compiled._weight(sig, shape, buffers, values) is first
    assert compiled._weight(sig, shape, [b.clone() for b in buffers], values) is not first
    assert compiled._weight(sig, shape, buffers, values.clone()) is not first
    third = compiled._weight(sig, shape, buffers, values)
    assert third.ust._values.ctypes.data == values.data_ptr()  # zero-copy over the op's values
    fresh = values.clone()
    key = id(fresh)
    compiled._weight(sig, shape, buffers, fresh)
    assert key in compiled._WEIGHTS
    del fresh
    gc.collect()
    hit = compiled._WEIGHTS.get(key)
    assert hit is None or hit[0]() is not None  # dropped, unless the id names a newer live tensor


def _two_of_four(shape=(6, 8), seed=0):
    torch.manual_seed(seed)
    dense = torch.randn(shape)
    dense[:, 2::4] = 0
    dense[:, 3::4] = 0
    return TorchUST.from_torch(dense, "Structured(2, 4)"), dense


def test_eager_weight_is_the_owner_over_exactly_these_tensors():
    """``ustc::linear`` runs the live TorchUST's plan only where every argument is that weight's own:
    the same values and buffer tensors (identity, for 0, 1, 2 and 3 buffers), format text and shape."""
    torch.manual_seed(1)
    dense = torch.randn(6, 8) * (torch.rand(6, 8) < 0.5)
    weights = [TorchUST.from_torch(dense, f) for f in ("Dense", "CSR", "COO")] + [_two_of_four()[0]]
    assert sorted(len(w._keys) for w in weights) == [0, 1, 2, 3]
    for w in weights:
        sig, shape, buffers, values = _args(w)
        assert compiled._eager_weight(sig, shape, buffers, values) is w
        assert compiled._eager_weight(sig, [shape[1], shape[0]], buffers, values) is None
        assert compiled._eager_weight(sig, [shape[0], shape[1] + 1], buffers, values) is None
        assert compiled._eager_weight(sig + " ", shape, buffers, values) is None
        assert compiled._eager_weight(sig, shape, buffers, values.clone()) is None
        assert compiled._eager_weight(sig, shape, buffers + [buffers[0] if buffers else values], values) is None
        if buffers:
            assert compiled._eager_weight(sig, shape, buffers[:-1], values) is None
            for k in range(len(buffers)):
                changed = list(buffers)
                changed[k] = changed[k].clone()  # equal values, another tensor
                assert compiled._eager_weight(sig, shape, changed, values) is None


def test_linear_op_runs_the_eager_weight_and_sees_its_new_buffers():
    """The op finds the weight by its values tensor; a weight whose storage was replaced (as ``reformat``
    and pruning do) is found over its new tensors, not the old ones, and computes with the new ones."""
    w, dense = _two_of_four(seed=2)
    x = torch.randn(1, 8)
    with torch.inference_mode():
        torch.testing.assert_close(torch.ops.ustc.linear.default(*_args(w), x, None), F.linear(x, dense))
        assert id(w.stored_values()) not in compiled._WEIGHTS  # the owner ran: no rebuilt weight
        old = _args(w)
        replaced = dense * (torch.rand(dense.shape) < 0.5)
        w._set_ust(TorchUST.from_torch(replaced, "CSR").ust)
        assert compiled._eager_weight(*old) is None
        torch.testing.assert_close(torch.ops.ustc.linear.default(*_args(w), x, None), F.linear(x, replaced))
