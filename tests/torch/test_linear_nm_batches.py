"""A 2:4 ``nn.Linear`` under ``torch.inference_mode`` at every kind of batch, on one and two threads:
``kernels._structured_tile`` (through ``routes.LinearNmRoute``) where the batch is a multiple of 16 and the
values are float32 (bfloat16 weights through their float32 twin), the batch-1 SpMV kernels and the built-in
``structured_spmm`` elsewhere. Oracle: the pruned dense weight in float64."""

from __future__ import annotations

import numba
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

import ustc  # noqa: E402
import ustc.torch  # noqa: E402
from ustc.formats import Structured  # noqa: E402
from ustc.kernels import _structured_tile  # noqa: E402
from ustc.ops import routes, runtime  # noqa: E402
from ustc.tensor.interop import plain_format  # noqa: E402

# 1: the SpMV; 3, 17, 130: not a multiple of 16 (the built-in kernel); 16: the narrow tile; 128: the widest
# tile; 144 (9 narrow tiles) and 192 (3 wide tiles): batches the wider tiles would leave a remainder of
TILED = (16, 128, 144, 192)
OTHERS = (1, 3, 17, 130)


@pytest.fixture
def every_size(monkeypatch):
    """A small layer takes the tile kernel too (normally above ``runtime.SERIAL_WORK`` only)."""
    monkeypatch.setattr(runtime, "SERIAL_WORK", 0)


@pytest.fixture
def threads():
    """Sets torch's and Numba's thread counts (restored after the test)."""
    before = (torch.get_num_threads(), numba.get_num_threads())

    def use(n: int) -> None:
        torch.set_num_threads(n)
        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))

    yield use
    torch.set_num_threads(before[0])
    numba.set_num_threads(before[1])


def _layer(dtype, rows=40, columns=64, seed=0):
    """A 2:4 layer of ``dtype`` (40 output rows: a last task of 8 rows) and its float64 oracle."""
    torch.manual_seed(seed)
    layer = nn.Linear(columns, rows)
    ustc.torch.prune_model(layer, method="2:4")
    layer = layer.to(dtype).eval()
    ustc.torch.reformat_model(layer)
    assert plain_format(layer.weight.ust.format) == plain_format(Structured(2, 4))  # (uint8 coordinates)
    with torch.no_grad():
        weight = layer.weight.to_dense().double()  # (bfloat16 values are stored as their bits)
    return layer, weight, layer.bias.detach().double()


def _route(layer):
    return layer.weight._last[4].mm._route  # the planned product of the layer's last call


def _check(layer, weight, bias, batch, dtype, tiled, rtol):
    x = torch.randn(batch, weight.shape[1]).to(dtype)
    before = x.clone()
    with torch.inference_mode():
        for _ in range(2):  # the plan's buffers are reused: nothing is left from the last call
            got = layer(x)
            assert got.shape == (batch, weight.shape[0]) and got.dtype == dtype
            want = x.double() @ weight.T + bias
            torch.testing.assert_close(got.double(), want, rtol=rtol, atol=rtol * (1 + float(want.abs().max())))
    assert torch.equal(x, before)
    route = _route(layer)
    assert (isinstance(route, routes.LinearNmRoute) and route.op == "spmm") == tiled, (batch, route)


@pytest.mark.parametrize("count", [1, 2])
def test_float32_every_batch(count, every_size, threads):
    threads(count)
    layer, weight, bias = _layer(torch.float32)
    for batch in TILED + OTHERS:
        _check(layer, weight, bias, batch, torch.float32, batch in TILED, 1e-5)


def test_float64_and_bfloat16(every_size, threads):
    """float64 values keep the built-in kernel; bfloat16 weights run the tile on their float32 twin."""
    threads(2)
    layer, weight, bias = _layer(torch.float64, seed=1)
    for batch in (16, 17):
        _check(layer, weight, bias, batch, torch.float64, False, 1e-10)
    layer, weight, bias = _layer(torch.bfloat16, seed=2)
    for batch in (16, 128, 17):
        _check(layer, weight, bias, batch, torch.bfloat16, batch in TILED, 2e-2)


@pytest.mark.parametrize("n, m, batches", [(2, 4, (16, 64, 128)), (3, 6, (16,))])
def test_every_task_once_with_any_worker_count(n, m, batches):
    """The tile kernels called directly: one worker, as many as threads, more than threads (the extra ones
    find no task left), each batch's kernel, a partial last chunk of rows; ``alpha`` and accumulation; 3:6
    takes the narrow tile's path for slots whose column offsets are not compile-time constants."""
    rng = np.random.default_rng(n)
    rows, columns = 37, 4 * m * 3
    slots = columns // m * n
    crd = np.sort(np.stack([rng.choice(m, n, replace=False) for _ in range(rows * columns // m)]), axis=1)
    crd = crd.astype(np.uint8).ravel()
    vals = rng.standard_normal(rows * slots).astype(np.float32)
    dense = np.zeros((rows, columns))
    group = np.arange(slots) // n * m
    dense[np.repeat(np.arange(rows), slots), np.tile(group, rows) + crd] = vals
    for batch in batches:
        b = _structured_tile.aligned_empty((columns, batch), np.float32)
        b[...] = rng.standard_normal((columns, batch))
        kernel = _structured_tile.kernel_for(n, m, batch)
        y0 = rng.standard_normal((rows, batch)).astype(np.float32)
        for workers in (1, numba.get_num_threads(), 5):
            y = np.full((rows, batch), np.nan, np.float32)
            kernel(crd, vals, b, y, np.float32(1.0), rows, slots, False, workers)
            np.testing.assert_allclose(y, dense @ b, rtol=1e-5, atol=1e-4)
            y = y0.copy()
            kernel(crd, vals, b, y, np.float32(-0.5), rows, slots, True, workers)
            np.testing.assert_allclose(y, y0 - 0.5 * dense @ b, rtol=1e-5, atol=1e-4)
