"""Level analysis of triangular solves (host, no device) and the ``target`` dispatch of ``ustc.solve``.

The kernels themselves run in ``tests/cuda/test_trisolve.py`` (simulator, PTX, GPU).
"""

from __future__ import annotations

import dataclasses

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from ustc.ops import cuda_host, trisolve
from ustc.ops import solve as solve_module


def random_pattern(n, density, seed, side=None):
    """A random CSR pattern with a full diagonal; ``side``: keep only the lower / upper part."""
    m = (sp.random(n, n, density=density, random_state=seed) + sp.eye(n)).tocsr()
    if side is not None:
        m = (sp.tril(m) if side == "lower" else sp.triu(m)).tocsr()
    m.sort_indices()
    return m


def dependencies(m, lower):
    coo = m.tocoo()
    keep = coo.col < coo.row if lower else coo.col > coo.row
    return list(zip(coo.row[keep].tolist(), coo.col[keep].tolist()))


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("seed,n,density,side", [(0, 60, 0.05, None), (1, 80, 0.02, "lower"), (2, 80, 0.02, "upper"),
                                                 (3, 40, 0.3, None), (4, 150, 0.01, None)])
def test_levels_are_a_valid_minimal_schedule(lower, seed, n, density, side):
    m = random_pattern(n, density, seed, side)
    s = trisolve.analyse_csr(m.indptr, m.indices, lower)
    level = s.levels()
    deps = dependencies(m, lower)
    assert all(level[c] < level[r] for r, c in deps)            # dependencies in strictly earlier levels
    for r in range(n):                                          # and each row as early as it can go
        own = [level[c] for rr, c in deps if rr == r]
        assert level[r] == (1 + max(own) if own else 0)
    graph = nx.DiGraph(deps)
    graph.add_nodes_from(range(n))
    assert s.nlevels == nx.dag_longest_path_length(graph) + 1   # levels = longest dependency chain
    assert sorted(s.level_rows.tolist()) == list(range(n))
    assert s.level_ptr[0] == 0 and s.level_ptr[-1] == n and (np.diff(s.level_ptr) > 0).all()
    assert all((np.diff(s.rows(k)) > 0).all() for k in range(s.nlevels))
    assert (m.indices[s.diag] == np.arange(n)).all()           # diag points at (r, r)
    assert (s.n, s.nnz, s.lower) == (n, m.nnz, lower)


def test_special_shapes():
    empty = trisolve.analyse_csr(np.zeros(1, np.int32), np.zeros(0, np.int32), True)
    assert (empty.nlevels, empty.level_ptr.tolist(), empty.level_rows.tolist()) == (0, [0], [])
    diagonal = sp.diags(np.arange(1.0, 6)).tocsr()
    assert trisolve.analyse_csr(diagonal.indptr, diagonal.indices, False).nlevels == 1
    chain = (sp.eye(7) + sp.eye(7, k=-1)).tocsr()
    s = trisolve.analyse_csr(chain.indptr, chain.indices, True)
    assert s.nlevels == 7 and s.level_rows.tolist() == list(range(7))
    assert trisolve.analyse_csr(chain.indptr, chain.indices, False).nlevels == 1   # the other side: no deps
    missing = sp.csr_array(np.array([[0.0, 0], [1, 2]]))
    assert trisolve.analyse_csr(missing.indptr, missing.indices, True).diag.tolist() == [-1, 1]


def test_schedule_is_frozen_read_only_and_format_independent():
    m = random_pattern(30, 0.1, 5, "upper")
    s = trisolve.analyse(ustc.Tensor.from_package(m).convert("COO"), lower=False)
    t = trisolve.analyse_csr(m.indptr, m.indices, False)
    assert s.level_ptr.tolist() == t.level_ptr.tolist() and s.level_rows.tolist() == t.level_rows.tolist()
    assert s.level_ptr.dtype == np.int32 and not s.level_rows.flags.writeable
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.lower = True
    assert s.describe() == f"level-scheduled upper substitution on CSR rows, {s.nlevels} levels"


def test_a_schedule_for_another_pattern_is_refused():
    m = random_pattern(20, 0.1, 6, "lower")
    other = trisolve.analyse_csr(m.indptr, m.indices, False)
    with pytest.raises(ustc.UstcError, match="level schedule was made for a 20×20 upper pattern"):
        trisolve.solve_cuda(ustc.Tensor.from_package(m), np.ones(20), True, False, other)


# -- dispatch: what fails before anything launches (no device, no simulator) -----------------

def fake_device_tensor(dense):
    """A CSR tensor that says it lives on 'cuda' (NumPy buffers: only its device is read)."""
    host = ustc.Tensor.from_dense(dense, "CSR")
    return ustc.Tensor(host.format, host.shape, host._buffers, host._values, device="cuda", package="cupy")


class _FakeDevice:
    """Stands in for a device array in the device check only."""


@pytest.fixture
def fake_device_of(monkeypatch):
    original = ustc.tensor.packages.device_of
    monkeypatch.setattr(ustc.tensor.packages, "device_of",
                        lambda x: "cuda" if isinstance(x, _FakeDevice) else original(x))


def test_mixed_devices_name_both(fake_device_of):
    a = fake_device_tensor(np.tril(np.ones((3, 3))))
    with pytest.raises(ustc.DeviceError, match=r"'a' is on cuda, 'b' is on cpu"):
        ustc.solve(a, np.ones(3))
    with pytest.raises(ustc.DeviceError, match=r"'a' is on cuda, 'b' is on cpu"):
        ustc.solve(a, np.ones(3), "triangular", target="cuda")
    host = ustc.Tensor.from_dense(np.tril(np.ones((3, 3))), "CSR")
    with pytest.raises(ustc.DeviceError, match=r"'a' is on cpu, 'x0' is on cuda"):
        ustc.solve(host, np.ones(3), "cg", x0=_FakeDevice())


def test_target_errors(fake_device_of):
    L = ustc.Tensor.from_dense(np.tril(np.ones((3, 3))), "CSR")
    with pytest.raises(ustc.UstcError, match="target must be one of cpu, cuda"):
        ustc.solve(L, np.ones(3), target="gpu")
    with pytest.raises(ustc.DeviceError, match="target 'cpu' but the operands are on cuda"):
        ustc.solve(fake_device_tensor(np.tril(np.ones((3, 3)))), _FakeDevice(), target="cpu")


@pytest.mark.parametrize("lower", [True, False])
def test_singular_raises_the_cpu_error_before_any_launch(lower):
    t = np.tril(np.ones((5, 5))) if lower else np.triu(np.ones((5, 5)))
    t[1, 1] = t[3, 3] = 0                     # the first bad row in substitution order is reported
    row = 1 if lower else 3
    for target in ("cpu", "cuda"):
        with pytest.raises(ustc.SolveError, match=rf"singular: diagonal entry \({row}, {row}\) is missing or zero"):
            ustc.solve(ustc.Tensor.from_dense(t, "CSR"), np.ones(5), target=target)
    missing = sp.csr_array(np.tril(np.ones((4, 4))) - np.diag([0, 0, 1, 0]))
    with pytest.raises(ustc.SolveError, match=r"diagonal entry \(2, 2\)"):
        ustc.solve(missing, np.ones(4), "triangular", target="cuda")


def test_non_triangular_is_refused_on_cuda():
    with pytest.raises(ustc.SolveError, match="needs a triangular matrix"):
        ustc.solve(ustc.Tensor.from_dense(np.ones((3, 3)), "CSR"), np.ones(3), "triangular", target="cuda")


def test_cuda_without_a_device_says_so():
    if cuda_host.compute_capability() != "none":
        pytest.skip("a device (or the simulator) is present here")
    L = ustc.Tensor.from_dense(np.tril(np.ones((3, 3))), "CSR")
    with pytest.raises(ustc.DeviceError, match="needs an NVIDIA GPU"):
        ustc.solve(L, np.ones(3), target="cuda")
    with pytest.raises(ustc.DeviceError, match="needs an NVIDIA GPU"):
        ustc.solve(sp.eye(3, format="csr") * 2, np.ones(3), "cg", target="cuda")


def test_cpu_path_handles_empty_and_keeps_its_route(rng):
    x, info = ustc.solve(ustc.Tensor.from_package(sp.csr_array((0, 0))), np.zeros(0), "triangular",
                         return_info=True)
    assert x.shape == (0,) and info.converged and info.levels is None
    L = ustc.Tensor.from_dense(np.tril(np.ones((3, 3))), "CSR")
    _, info = ustc.solve(L, np.ones(3), target="cpu", return_info=True)
    assert info.plan_info == "lower substitution on CSR rows"


@pytest.mark.parametrize("dense, method", [(np.array([[4.0, 1, 0], [1, 4, 1], [0, 1, 4]]), "cg"),
                                           (np.array([[4.0, 2, 0], [1, 4, 1], [0, 1, 4]]), "gmres"),
                                           (np.tril(np.ones((3, 3))) + np.eye(3), "triangular")])
def test_method_none_reads_a_device_matrix_on_the_host_once(monkeypatch, fake_device_of, dense, method):
    """Choosing the method needs the pattern (triangular?) and the values (Hermitian?): one copy serves both."""
    copies, chosen = [], []
    host = ustc.Tensor.from_dense(dense, "COO")     # not CSR: the old checks converted through the host
    a = ustc.Tensor(host.format, host.shape, host._buffers, host._values, device="cuda", package="cupy")
    monkeypatch.setattr(ustc.Tensor, "to", lambda self, device: copies.append(device) or host)
    monkeypatch.setattr(solve_module, "_krylov", lambda a, b, dtype, m, *rest: chosen.append(m) or (b, None))
    monkeypatch.setattr(solve_module, "_triangular_cuda", lambda a, b, lower, unit: chosen.append("triangular")
                        or (b, None))
    monkeypatch.setattr(solve_module, "_wrap", lambda x, package: x)
    monkeypatch.setattr(solve_module, "_rhs", lambda b: ("cupy", np.ones(3)))    # b: a device vector
    ustc.solve(a, _FakeDevice(), check=False)
    assert chosen == [method] and copies == ["cpu"]
