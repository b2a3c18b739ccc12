"""float16 / bfloat16 TorchUST weights on a CUDA device (``@pytest.mark.gpu``; skipped cleanly without one).

A pruned ``nn.Linear`` in the narrow dtype, reformatted on the device, against the dense masked
layer: the values stay narrow and on the device, the product sums in float32 (the generated
kernels of ``codegen.cuda_bfloat16`` and ``codegen.lower.NARROW_FLOATS``), the result is narrow.
The simulator has no torch CUDA tensors, so these run only on a GPU.
"""

from __future__ import annotations

import copy

import pytest

from _spawn import no_gpu_reason

torch = pytest.importorskip("torch")
REASON = no_gpu_reason() or (None if torch.cuda.is_available() else "torch has no CUDA device")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=f"needs an NVIDIA GPU ({REASON})")]

TOL = {torch.float16: dict(rtol=1e-2, atol=1e-2), torch.bfloat16: dict(rtol=4e-2, atol=4e-2)}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("batch", [1, 16])
def test_narrow_sparse_linear_on_the_device(dtype, batch):
    pytest.importorskip("cupy")   # ustc views torch CUDA tensors through CuPy
    import ustc.torch
    from ustc.torch import TorchUST

    torch.manual_seed(5)
    layer = torch.nn.Linear(96, 40).to("cuda", dtype)
    ustc.torch.prune_model(layer, 0.8)
    dense = copy.deepcopy(layer)
    ustc.torch.reformat_model(layer)
    W = layer.weight
    assert isinstance(W, TorchUST) and W.dtype == dtype and W.device.type == "cuda"
    x = torch.randn(batch, 96, device="cuda", dtype=dtype)
    with torch.inference_mode():
        got = layer(x)
    assert got.dtype == dtype and got.device.type == "cuda"
    wide = torch.nn.functional.linear(x.float(), dense.weight.float(), dense.bias.float())   # the float32 oracle
    torch.testing.assert_close(got.float(), wide, **TOL[dtype])
