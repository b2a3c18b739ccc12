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
