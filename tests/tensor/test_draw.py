"""Pictures of tensors (ustc.tensor.draw): valid PNGs, errors, padding detection, speed of draw_raw."""

from __future__ import annotations

import time

import numpy as np
import pytest

import ustc
from ustc.tensor import draw as drawing
from ustc.tensor.draw import draw, draw_raw, draw_storage
from ustc.tensor.storage import Layout

pytest.importorskip("matplotlib")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png(path, min_side: int = 40):
    with open(path, "rb") as f:
        assert f.read(8) == PNG_SIGNATURE
    from matplotlib import image

    pixels = image.imread(path)
    assert pixels.ndim == 3 and min(pixels.shape[:2]) >= min_side
    assert pixels.std() > 0                                   # not a blank image


def example_4x8():
    a = np.zeros((4, 8))
    for (i, j), v in zip([(0, 0), (0, 1), (1, 1), (1, 3), (2, 2), (3, 3)], range(1, 7)):
        a[i, j] = v
    return a


def tensor(x, fmt):
    coords = np.nonzero(x)
    return ustc.Tensor.from_coo(coords, x[coords], x.shape, fmt)


def random_tensor(shape, fmt, density=0.3, seed=0):
    rng = np.random.default_rng(seed)
    x = np.where(rng.random(shape) < density, rng.integers(1, 99, shape), 0).astype(float)
    x.flat[0] = 1.5
    return tensor(x, fmt)


def snapshot(t):
    return {k: np.array(b, copy=True) for k, b in t._buffers.items()}, np.array(t._values, copy=True)


def assert_unchanged(t, before):
    buffers, values = before
    assert set(buffers) == set(t._buffers)
    for key, b in buffers.items():
        np.testing.assert_array_equal(t._buffers[key], b)
    np.testing.assert_array_equal(t._values, values)


CASES = {
    "csr": lambda: tensor(example_4x8(), "CSR"),
    "coo": lambda: tensor(example_4x8(), "COO"),
    "delta2": lambda: tensor(np.array([[1.0] + [0] * 14 + [2.0], [0] * 5 + [3.0] + [0] * 10]), "DELTA(2)"),
    "delta_packed": lambda: random_tensor((3, 20), "DELTA(2, packed)", density=0.2),
    "diai": lambda: tensor(np.diag([1.0, 2, 3, 4]) + np.diag([5.0, 6, 7], 1) + np.diag([8.0, 9, 1], -1), "DIAI"),
    "diaj": lambda: tensor(example_4x8(), "DIAJ"),
    "bsr": lambda: tensor(example_4x8()[:, :7], "BSR(2, 2)"),
    "structured": lambda: tensor(example_4x8(), "Structured(2, 4)"),
    "dense": lambda: ustc.Tensor.from_dense(example_4x8()),
    "csf3": lambda: random_tensor((3, 4, 5), "CSF(3)"),
    "coo3": lambda: random_tensor((2, 3, 4), "COO(3)"),
    "batched": lambda: random_tensor((2, 3, 4), "BatchedCSR"),
    "loose": lambda: tensor(np.eye(3), "(i, j) -> (i : dense, j : loose_compressed)"),
    "vector": lambda: tensor(np.array([0, 1.5, 0, -2, 0, 0, 3.25]), "(i) -> (i : compressed)"),
    "complex": lambda: tensor(np.array([[1 + 2j, 0], [0, 3j]]), "CSR"),
    "empty": lambda: ustc.Tensor.from_coo((np.zeros(0, int),) * 2, np.zeros(0), (3, 4)),
    "zero_extent": lambda: ustc.Tensor.from_coo((np.zeros(0, int),) * 2, np.zeros(0), (0, 4), "CSR"),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("fn", [draw, draw_storage, draw_raw], ids=lambda f: f.__name__)
def test_pictures_are_pngs_and_leave_the_tensor_alone(tmp_path, name, fn):
    t = CASES[name]()
    before = snapshot(t)
    path = tmp_path / f"{name}.png"
    assert fn(t, path) == path
    assert_png(path)
    assert_unchanged(t, before)


def test_draw_storage_any_rank(tmp_path):
    t = random_tensor((2, 3, 2, 3), "CSF(4)")
    assert_png(draw_storage(t, tmp_path / "csf4.png"))
    long = random_tensor((50, 60), "COO", density=0.2)
    assert_png(draw_storage(long, tmp_path / "long.png", max_cells=16))


def test_draw_rejects_rank_4(tmp_path):
    t = random_tensor((2, 2, 2, 2), "CSF(4)")
    with pytest.raises(ustc.UnsupportedOperation, match="rank 4"):
        draw(t, tmp_path / "x.png")
    with pytest.raises(ustc.UnsupportedOperation, match="rank"):
        draw_raw(t, tmp_path / "y.png")
    assert not (tmp_path / "x.png").exists()


def test_draw_rejects_huge(tmp_path):
    t = ustc.Tensor.from_coo((np.array([0]), np.array([0])), np.array([1.0]), (4096, 4096))
    with pytest.raises(ustc.UnsupportedOperation, match="draw_raw"):
        draw(t, tmp_path / "x.png")
    t3 = ustc.Tensor.from_coo((np.array([0]),) * 3, np.array([1.0]), (100, 2, 2))
    with pytest.raises(ustc.UnsupportedOperation, match="slices"):
        draw(t3, tmp_path / "y.png")


def test_draw_larger_grids(tmp_path):
    assert_png(draw(random_tensor((40, 60), "CSR", density=0.1), tmp_path / "mid.png"), min_side=200)
    assert_png(draw(random_tensor((300,), "Dense(1)"), tmp_path / "vec.png"))
    assert_png(draw(random_tensor((10, 6, 7), "CSF(3)"), tmp_path / "slices.png"), min_side=200)


def status_of(t):
    buffers, values = drawing._flat_storage(t)
    return drawing._position_status(Layout.of(t.format, t.shape), buffers, values)


def test_padding_status_delta():
    x = np.zeros((1, 16))
    x[0, 0], x[0, 15] = 1, 2
    t = ustc.Tensor.from_dense(x, "DELTA(2)")
    np.testing.assert_array_equal(np.asarray(t.values), [1, 0, 0, 0, 2])
    np.testing.assert_array_equal(status_of(t)[-1], [0, 1, 1, 1, 0])


def test_padding_status_dia_outside_matrix():
    a = np.diag([1.0, 2, 3, 4]) + np.diag([5.0, 6, 7], 1)
    t = tensor(a, "DIAI")
    status = status_of(t)[-1].reshape(2, 4)                   # diagonals 0 and 1 over i
    np.testing.assert_array_equal(status, [[0, 0, 0, 0], [0, 0, 0, 2]])


def test_padding_status_structured_and_upper_levels():
    t = tensor(example_4x8(), "Structured(2, 4)")
    status = status_of(t)
    vals = np.asarray(t.values)
    np.testing.assert_array_equal(status[-1] == 1, vals == 0)
    # a block whose stored entries are all padding is padding one level up
    np.testing.assert_array_equal(status[1], [0, 1, 0, 1, 0, 1, 0, 1])


def test_draw_raw_one_million_entries(tmp_path):
    rng = np.random.default_rng(0)
    n = 1_000_000
    rows = rng.integers(0, 20_000, n)
    cols = (rng.random(n) ** 2 * 30_000).astype(np.int64)
    t = ustc.Tensor.from_coo((rows, cols), rng.standard_normal(n), (20_000, 30_000), "CSR")
    start = time.perf_counter()
    draw_raw(t, tmp_path / "raw.png")
    assert time.perf_counter() - start < 5.0
    assert_png(tmp_path / "raw.png", min_side=200)
    t3 = ustc.Tensor.from_coo(tuple(rng.integers(0, s, n) for s in (300, 400, 500)), rng.standard_normal(n),
                              (300, 400, 500))
    start = time.perf_counter()
    draw_raw(t3, tmp_path / "raw3.png", bins=128)
    assert time.perf_counter() - start < 5.0
    assert_png(tmp_path / "raw3.png", min_side=200)


def test_draw_raw_bins():
    rng = np.random.default_rng(2)
    rows, cols = rng.integers(0, 1000, 5000), rng.integers(0, 3000, 5000)
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.add_subplot()
    drawing._binned(fig, ax, rows, cols, 1000, 3000, bins=100)
    counts = ax.images[0].get_array()
    assert counts.shape == (34, 100)
    assert counts.sum() == 5000
