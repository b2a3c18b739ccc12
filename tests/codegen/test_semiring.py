"""Semirings, prologs and epilogs in the compiler: notation, lattices, function keys, emitted
kernels (golden files), the ``@ustc.jit`` and ``ustc.einsum`` front ends, and kernels without a
stable function key kept out of the disk cache. Matmul's side is in ``tests/matmul``."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from ustc.codegen import functions
from ustc.codegen import lattice as lat
from ustc.codegen import notation as nt
from ustc.codegen.compile import Operand, compile_program
from ustc.codegen.emit_cpu import CpuEmitter
from ustc.codegen.plans import plans_of, plans_text
from ustc.codegen.semiring import PLUS_TIMES, Semiring, as_semiring, identity
from ustc.errors import KernelError, UnsupportedOperation, UstcError

F = ustc.formats
GOLDEN = Path(__file__).parent / "golden"


def relu(v):
    return v if v > 0 else 0.0


def magnitude(v):
    return v if v >= 0 else -v


def smaller(a, b):
    return a if a < b else b


def plus(a, b):
    return a + b


def _a(name, *idx):
    return nt.Access(name, tuple(idx))


def _slots(expr):
    return nt.number_accesses(expr)


# -- semirings ------------------------------------------------------------------------------

def test_named_semirings_aliases_and_dicts():
    assert as_semiring(None) is PLUS_TIMES and PLUS_TIMES.is_plus_times
    sr = as_semiring("min_plus")
    assert (sr.add, sr.mul, sr.name) == ("min", "plus", "min_plus")
    assert as_semiring("lor_land") == as_semiring("or_and") == Semiring("|", "&")
    assert as_semiring("MAX_TIMES") == Semiring("max", "*")
    assert as_semiring({"add": "min", "mul": "+", "atomic_add": None}) == sr
    assert hash(sr) == hash(as_semiring("min_plus"))
    with pytest.raises(UstcError, match="unknown semiring operator 'avg'"):
        as_semiring("avg_plus")
    with pytest.raises(UstcError, match="<add>_<mul>"):
        as_semiring("minplus")
    with pytest.raises(UstcError, match="unknown key 'plus'"):
        as_semiring({"plus": "min"})


@pytest.mark.parametrize("op, dtype, expected", [
    ("min", np.float32, math.inf), ("max", np.float64, -math.inf), ("min", np.int64, np.iinfo(np.int64).max),
    ("max", np.int32, np.iinfo(np.int32).min), ("max", np.uint8, 0), ("or", np.bool_, False),
    ("and", np.bool_, True), ("times", np.float64, 1.0), ("plus", np.int64, 0), ("min", np.bool_, True)])
def test_identities_per_dtype(op, dtype, expected):
    assert identity(op, dtype) == expected


def test_complex_values_have_no_order():
    with pytest.raises(UnsupportedOperation, match="complex"):
        as_semiring("min_plus").identity(np.complex128)


def test_user_semiring_is_checked_and_keyed():
    sr = Semiring(add=smaller, mul=plus, zero=math.inf)
    assert isinstance(sr.add, functions.Function) and sr.identity(np.float32) == math.inf
    assert sr == Semiring(add=smaller, mul=plus, zero=math.inf)
    assert sr != Semiring(add=smaller, mul="+", zero=math.inf)   # a user plus is another operator
    assert "smaller#" in sr.name and "(zero=inf)" in sr.name
    with pytest.raises(UstcError, match="needs its identity"):
        Semiring(add=smaller, mul=plus)
    with pytest.raises(UstcError, match="is not its identity"):
        Semiring(add=smaller, mul=plus, zero=0.0)
    with pytest.raises(UstcError, match="not commutative"):
        Semiring(add=lambda a, b: a - b if a != 0 and b != 0 else a + b, mul=plus, zero=0.0)
    with pytest.raises(UstcError, match="must take 2 argument"):
        Semiring(add=relu, mul=plus, zero=0.0)
    with pytest.raises(UstcError, match="its identity is inf"):
        Semiring("min", "plus", zero=0.0)
    assert Semiring("min", "plus", zero=math.inf) == as_semiring("min_plus")
    with pytest.raises(UstcError, match="Python function"):
        Semiring(add=max, mul=plus, zero=0.0)


# -- function keys ------------------------------------------------------------------------

def test_function_keys_follow_the_code_and_what_it_reads():
    assert functions.function(relu).key == functions.function(relu).key
    assert functions.function(lambda v: v + 1).key == functions.function(lambda v: v + 1).key
    assert functions.function(lambda v: v + 1).key != functions.function(lambda v: v + 2).key
    scope: dict = {"SCALE": 2.0}
    exec("def scaled(v):\n    return SCALE * v\n", scope)
    before = functions.function(scope["scaled"]).key
    scope["SCALE"] = 3.0
    assert functions.function(scope["scaled"]).key != before  # a global it reads changed
    table = np.arange(3.0)
    unstable = functions.function(lambda v: v + table[0])  # reads an array through its closure
    assert not unstable.stable and unstable.key.startswith("local-")
    assert functions.function(relu).stable


def test_function_keys_are_the_same_in_another_process(tmp_path):
    (tmp_path / "userfns.py").write_text(textwrap.dedent("""
        import math
        LIMIT = 4.0
        def clip(v):
            return min(v, LIMIT) if not math.isnan(v) else 0.0
    """))
    code = "import sys; sys.path.insert(0, sys.argv[1]); import userfns; from ustc.codegen import functions; " \
           "print(functions.function(userfns.clip).key)"
    keys = {subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                           check=True).stdout.strip() for _ in range(2)}
    sys.path.insert(0, str(tmp_path))
    try:
        import userfns
        keys.add(functions.function(userfns.clip).key)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("userfns", None)
    assert len(keys) == 1 and not next(iter(keys)).startswith("local-")


def test_functions_must_be_python_functions_of_the_right_arity():
    with pytest.raises(UstcError, match="wrap builtins"):
        functions.function(abs, 1)
    with pytest.raises(UstcError, match="must take 1 argument"):
        functions.function(smaller, 1, "epilog")
    with pytest.raises(UstcError, match="positional parameters only"):
        functions.function(lambda *v: v, None)


# -- lattices -----------------------------------------------------------------------------

def _points(expr, semiring=PLUS_TIMES):
    expr = _slots(expr)
    slots = tuple(a.slot for a in expr.accesses())
    return {tuple(sorted(p.present)): str(p.expr) for p in lat.build(expr, slots, semiring).points}


def test_min_plus_co_iteration_is_an_intersection():
    sr = as_semiring("min_plus")
    expr = sr.multiply(_a("A", "i", "j"), _a("x", "j"))
    assert _points(expr, sr) == {(0, 1): "A[i, j] + x[j]"}          # a union would add A alone, x alone
    assert _points(nt.Add(_a("A", "i", "j"), _a("x", "j"))) == {(0, 1): "A[i, j] + x[j]", (0,): "A[i, j]",
                                                                (1,): "x[j]"}


def test_semiring_add_between_operands_is_a_union():
    sr = as_semiring("min_plus")
    assert _points(nt.Min(_a("A", "i"), _a("B", "i")), sr) == {(0, 1): "min(A[i], B[i])", (0,): "A[i]",
                                                               (1,): "B[i]"}
    orand = as_semiring("or_and")
    assert _points(nt.And(_a("A", "i"), _a("B", "i")), orand) == {(0, 1): "A[i] & B[i]"}
    assert set(_points(nt.Or(_a("A", "i"), _a("B", "i")), orand)) == {(0, 1), (0,), (1,)}


def test_user_operators_prologs_and_other_operators():
    user = Semiring(add=smaller, mul=plus, zero=math.inf)
    expr = user.multiply(_a("A", "i"), _a("B", "i"))
    assert list(_points(expr, user)) == [(0, 1)]
    prolog = nt.Apply(functions.function(relu), _a("A", "i"))
    assert list(_points(nt.Mul(prolog, _a("B", "i")))) == [(0, 1)]   # applied to stored values only
    assert list(_points(nt.Add(prolog, _a("B", "i")))) == [(0, 1), (0,), (1,)]
    # '-' under min-plus is neither add nor mul: an absent operand is the value +inf (the universe point)
    points = _points(nt.Sub(_a("A", "i"), _a("B", "i")), as_semiring("min_plus"))
    assert points[()] == "identity - identity" and points[(0,)] == "A[i] - identity"


def test_statement_text_names_the_semiring_and_epilog():
    sr = as_semiring("min_plus")
    st = nt.Statement(_a("y", "i"), sr.multiply(_a("A", "i", "j"), _a("x", "j")), True, semiring=sr)
    assert str(st) == "y[i] min= A[i, j] + x[j] [semiring min_plus]"
    h = functions.function(relu)
    st = nt.Statement(_a("y", "i"), nt.Mul(_a("A", "i", "j"), _a("x", "j")), epilog=h)
    assert str(st) == f"y[i] = A[i, j] * x[j] [epilog relu#{h.key[:12]}]" and st.functions == (h,)
    orand = nt.Statement(_a("y", "i"), nt.And(_a("A", "i", "j"), _a("x", "j")), True, semiring=as_semiring("or_and"))
    assert str(orand).startswith("y[i] |= A[i, j] & x[j]")


# -- emitted kernels (golden files; refresh with --update-golden) --------------------------

# fixed keys: a function's real key hashes its bytecode, which differs between Python versions
RELU = functions.Function("relu", "golden0relu", 1, relu)
MAGNITUDE = functions.Function("magnitude", "golden0magnitude", 1, magnitude)
MINPLUS = as_semiring("min_plus")
SPMV_MINPLUS = nt.Statement(_a("y", "i"), MINPLUS.multiply(_a("A", "i", "j"), _a("x", "j")), True, semiring=MINPLUS)
ORAND = as_semiring("or_and")
SPMV_ORAND = nt.Statement(_a("y", "i"), ORAND.multiply(_a("A", "i", "j"), _a("x", "j")), semiring=ORAND)
SPMV_FUSED = nt.Statement(_a("y", "i"), nt.Mul(nt.Apply(MAGNITUDE, _a("A", "i", "j")), _a("x", "j")), epilog=RELU)
CASES = {
    "semiring_minplus_spmv_csr": (SPMV_MINPLUS, {"A": F.CSR}, "float64"),
    "semiring_minplus_spmv_bsr22": (SPMV_MINPLUS, {"A": F.BSR(2, 2)}, "float64"),   # padding tested
    "semiring_orand_spmv_csr": (SPMV_ORAND, {"A": F.CSR}, "bool"),
    "semiring_prolog_epilog_spmv_csr": (SPMV_FUSED, {"A": F.CSR}, "float64"),     # epilog fused in the store
    "semiring_epilog_spmv_dcsr": (SPMV_FUSED, {"A": F.DCSR}, "float64"),          # epilog pass of its own
}


def emitted(statement, formats, dtype) -> str:
    program = nt.Program((statement,))
    operands = {a.tensor: Operand(a.tensor, formats.get(a.tensor), len(a.indices), dtype)
                for a in [statement.lhs, *statement.rhs.accesses()]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ustc.ConversionWarning)
        module = compile_program(program, operands, ("golden file: " + str(statement),))
    return CpuEmitter().emit(module) + f"\n\n{plans_text(module.meta['plan'])}\n"


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name, request):
    statement, formats, dtype = CASES[name]
    text = emitted(statement, formats, dtype)
    path = GOLDEN / f"{name}.py"
    if request.config.getoption("--update-golden"):
        path.write_text(text)
    assert path.exists(), f"missing {path}; run pytest tests/codegen --update-golden"
    assert text == path.read_text(), f"{name}: emitted source changed; review and run --update-golden"
    compile(text, str(path), "exec")


def test_emitted_kernels_say_what_they_fold():
    text = emitted(*CASES["semiring_minplus_spmv_csr"])
    assert "acc = np.inf" in text and "acc = min(acc, A_vals[" in text and "y[np.uintp(i)] = min(y[" in text
    assert "if A_vals[np.uintp(A_p3)] != 0:" in emitted(*CASES["semiring_minplus_spmv_bsr22"])
    assert "acc |= bool(A_vals[" in emitted(*CASES["semiring_orand_spmv_csr"])
    fused = emitted(*CASES["semiring_prolog_epilog_spmv_csr"])
    assert "y[np.uintp(i)] = relu_" in fused and "def kernel_0_epilog" not in fused and "'epilog': 'fused'" in fused
    passed = emitted(*CASES["semiring_epilog_spmv_dcsr"])
    assert "def kernel_0_epilog(vals):" in passed and "'epilog': 'kernel_0_epilog'" in passed


def test_or_reductions_need_a_bool_or_integer_output():
    with pytest.raises(UnsupportedOperation, match="must be bool or integer"):
        emitted(SPMV_ORAND, {"A": F.CSR}, "float64")


# -- front ends: @ustc.jit ------------------------------------------------------------------

def _graph(m, n, seed=0, density=0.3):
    rng = np.random.default_rng(seed)
    g = sp.random(m, n, density=density, random_state=seed, format="csr")
    g.data[:] = rng.integers(1, 10, g.nnz)
    return g


def _inf(g) -> np.ndarray:
    d = np.full(g.shape, np.inf)
    coo = g.tocoo()
    d[coo.row, coo.col] = coo.data
    return d


def test_jit_min_fold_spelling_and_decorator_semirings():
    g = _graph(7, 9)
    A = ustc.Tensor.from_package(g)
    x = np.arange(9.0)

    @ustc.jit
    def relax(d, A, x):
        d[i] = min(d[i], A[i, j] + x[j])

    d = np.full(7, 5.0)
    expected = np.minimum(5.0, np.min(_inf(g) + x, axis=1))
    np.testing.assert_array_equal(relax(d, A, x), expected)
    assert "semiring min_plus" in str(relax.program)

    @ustc.jit(semiring="max_times")
    def best(d, A, x):
        d[i] = A[i, j] * x[j]

    got = best(np.zeros(7), A, x + 1)
    prod = np.where(np.isinf(_inf(g)), -np.inf, _inf(g) * (x + 1))
    np.testing.assert_array_equal(got, prod.max(axis=1))

    @ustc.jit
    def reach(r, A, f):
        r[i] |= A[i, j] & f[j]

    a = ustc.Tensor.from_package(g > 0)
    f = np.zeros(9, bool)
    f[[1, 4]] = True
    r = np.zeros(7, bool)
    np.testing.assert_array_equal(reach(r, a, f), ((g > 0).astype(int) @ f.astype(int)) > 0)


def test_jit_user_functions_prologs_and_epilogs():
    g = _graph(6, 8, seed=2)
    g.data -= 5
    A = ustc.Tensor.from_package(g)
    x = np.linspace(-1, 1, 8)

    @ustc.jit(epilog=relu)
    def fused(y, A, x):
        y[i] = magnitude(A[i, j]) * x[j]

    np.testing.assert_allclose(fused(np.zeros(6), A, x), np.maximum(abs(g) @ x, 0))

    @ustc.jit(semiring=Semiring(add=smaller, mul=plus, zero=math.inf))
    def user(y, A, x):
        y[i] = smaller(y[i], plus(A[i, j], x[j]))

    h = ustc.Tensor.from_package(_graph(6, 8, seed=3))
    got = user(np.full(6, 100.0), h, x)
    np.testing.assert_allclose(got, np.minimum(100.0, np.min(_inf(_graph(6, 8, seed=3)) + x, axis=1)))

    @ustc.jit(epilog={"t": relu})
    def two(t, r, A, x):
        t[i] = A[i, j] * x[j]
        r[i] = t[i] * 2.0

    t, r = two(np.zeros(6), np.zeros(6), A, x)
    np.testing.assert_allclose(t, np.maximum(g @ x, 0))
    np.testing.assert_allclose(r, 2 * np.maximum(g @ x, 0))


def test_jit_semiring_errors_point_at_the_statement():
    with pytest.raises(KernelError, match="folds with min; this statement folds with max"):
        @ustc.jit(semiring="min_plus")
        def bad(y, A, x):
            y[i] = max(y[i], A[i, j] + x[j])
    with pytest.raises(KernelError, match="needs its identity"):
        @ustc.jit
        def bad2(y, A, x):
            y[i] = smaller(y[i], A[i, j] + x[j])
    with pytest.raises(KernelError, match="epilog for 'z'"):
        @ustc.jit(epilog={"z": relu})
        def bad3(y, A, x):
            y[i] = A[i, j] * x[j]
    with pytest.raises(KernelError, match="unknown function 'nowhere'"):
        @ustc.jit
        def bad4(y, A, x):
            y[i] = nowhere(A[i, j]) * x[j]  # noqa: F821
    with pytest.raises(KernelError, match="min\\(\\) takes two arguments"):
        @ustc.jit
        def bad5(y, A):
            y[i] = min(A[i, j])
    with pytest.raises(KernelError, match="unknown semiring operator"):
        ustc.jit(semiring="mean_plus")(lambda y: None)


# -- front ends: ustc.einsum ---------------------------------------------------------------

def test_einsum_semirings_prologs_epilogs():
    g = _graph(5, 6, seed=4)
    A = ustc.Tensor.from_package(g)
    x = np.arange(6.0) - 2
    np.testing.assert_array_equal(ustc.einsum("ij,j->i", A, x, semiring="min_plus"), np.min(_inf(g) + x, axis=1))
    np.testing.assert_allclose(ustc.einsum("ij,j->i", A, x, prologs={1: lambda v: v * v}), g @ (x * x))
    np.testing.assert_allclose(ustc.einsum("ij,j->i", A, x, prologs=[None, relu], epilog=lambda v: -v),
                               -(g @ np.maximum(x, 0)))
    dense = g.toarray()          # all-dense operands take the generated path too (every entry present)
    np.testing.assert_array_equal(ustc.einsum("ij,j->i", dense, x, semiring="min_plus"),
                                  np.min(dense + x, axis=1))
    with pytest.raises(KernelError, match="not an operand number"):
        ustc.einsum("ij,j->i", A, x, prologs={2: relu})


def test_min_plus_with_a_sparse_vector_is_an_intersection():
    """A sparse x has stored entries only where A has some: a union would read x's absent
    entries as 0 and find paths of length A[i, j] through them."""
    g = _graph(8, 8, seed=5, density=0.4)
    A = ustc.Tensor.from_package(g)
    xs = np.zeros(8)
    xs[[0, 3]] = [2.0, 7.0]
    x = ustc.Tensor.from_dense(xs, "(i) -> (i : compressed)")
    xinf = np.where(xs != 0, xs, np.inf)
    expected = np.min(_inf(g) + xinf, axis=1)
    got = ustc.einsum("ij,j->i", A, x, semiring="min_plus")
    np.testing.assert_array_equal(got, expected)
    union = np.min(np.where(np.isinf(_inf(g)), 0, _inf(g)) + xs, axis=1)   # absent read as 0
    assert not np.array_equal(union, expected)


@pytest.mark.parametrize("out_format", [F.CSR, F.COO(2), F.DCSR, F.CSC])
def test_semiring_sparse_outputs_keep_zero_valued_entries(out_format):
    """max-plus of 2 and -2 is 0: an entry of the structural pattern, stored, not dropped."""
    a = ustc.Tensor.from_dense(np.array([[0.0, 2.0], [0.0, 0.0]]), "CSR")
    b = ustc.Tensor.from_dense(np.array([[0.0, 0.0], [-2.0, 5.0]]), "CSR")
    c = ustc.einsum("ik,kj->ij", a, b, semiring="max_plus", out_format=out_format)
    coords, values = c.entries()
    assert sorted(zip(*[cc.tolist() for cc in coords], values.tolist())) == [(0, 0, 0.0), (0, 1, 7.0)]


def test_semiring_elementwise_union_into_written_outputs():
    """min(A, B) under min: a union; DCSR is written by the kernel in its own format (the writer),
    CSR by the row kernel; an epilog on a sparse result applies to its entries."""
    ga, gb = _graph(6, 7, seed=6), _graph(6, 7, seed=7)
    A, B = ustc.Tensor.from_package(ga), ustc.Tensor.from_package(gb)
    expected = np.minimum(_inf(ga), _inf(gb))

    @ustc.jit(semiring="min_plus", epilog=lambda v: v * 10.0)
    def meet(C, A, B):
        C[i, j] = min(A[i, j], B[i, j])

    for fmt in (F.DCSR, F.CSR, F.COO(2)):
        c = meet(fmt, A, B)
        got = np.full((6, 7), np.inf)
        coords, values = c.entries()
        got[coords] = values
        np.testing.assert_array_equal(got, expected * 10.0)


def test_unkeyable_functions_are_compiled_in_memory_only(tmp_path, monkeypatch):
    monkeypatch.setenv("USTC_CACHE_DIR", str(tmp_path / "cache"))
    ustc.cache._forget()
    try:
        g = _graph(5, 5, seed=8)
        A = ustc.Tensor.from_package(g)
        x = np.ones(5)
        offset = np.array([3.0])
        ustc.einsum("ij,j->i", A, x, epilog=relu)
        stored = len(ustc.cache.entries())
        assert stored == 1
        got = ustc.einsum("ij,j->i", A, x, epilog=lambda v: v + offset[0])   # reads an array: no stable key
        np.testing.assert_allclose(got, g @ x + 3.0)
        assert len(ustc.cache.entries()) == stored
        mm = ustc.Matmul(A, x).plan(epilog=lambda v: v - offset[0])
        np.testing.assert_allclose(mm.execute(), g @ x - 3.0)
        assert "compiled in memory" in mm.plan_info and len(ustc.cache.entries()) == stored
    finally:
        ustc.cache._forget()


def test_kernels_of_different_functions_never_share_a_cache_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("USTC_CACHE_DIR", str(tmp_path / "cache"))
    ustc.cache._forget()
    try:
        A = ustc.Tensor.from_package(_graph(5, 5, seed=9))
        x = np.ones(5)
        one = ustc.einsum("ij,j->i", A, x, epilog=lambda v: v + 1.0)
        two = ustc.einsum("ij,j->i", A, x, epilog=lambda v: v + 2.0)
        np.testing.assert_allclose(two - one, 1.0)
        assert len(ustc.cache.entries()) == 2
    finally:
        ustc.cache._forget()


@pytest.mark.parametrize("out_format", [F.DCSR, F.COO(2), F.CSR])
def test_min_plus_spgemm_inner_products_through_the_writer(out_format):
    """C[i, j] = min_k A[i, k] + B[j, k]: the reduction is innermost, so a DCSR or COO output is
    written by the kernel in its own format (the writer), CSR by the row kernel."""
    g, h = _graph(6, 5, seed=10, density=0.4), _graph(7, 5, seed=11, density=0.4)
    st = nt.Statement(_a("C", "i", "j"), MINPLUS.multiply(_a("A", "i", "k"), _a("B", "j", "k")), semiring=MINPLUS)
    from ustc.ops import runtime

    run = runtime.prepare(nt.Program((st,)), {"A": ustc.Tensor.from_package(g), "B": ustc.Tensor.from_package(h),
                                              "C": out_format}, "cpu")
    module, _ = run.load()
    assert (plans_of(module)[0].writer > 0) == (out_format != F.CSR)
    C = run.run()["C"]
    got = np.full((6, 7), np.inf)
    coords, values = C.entries()
    got[coords] = values
    np.testing.assert_array_equal(got, np.min(_inf(g)[:, None, :] + _inf(h)[None, :, :], axis=2))


def test_cli_compiles_min_folds(capsys):
    from ustc.cli.main import main

    assert main(["compile", "--expr", "y[i] = min(y[i], A[i,j] + x[j])", "--format", "A=CSR"]) == 0
    text = capsys.readouterr().out
    assert "acc = np.inf" in text and "y[np.uintp(i)] = min(y[np.uintp(i)], acc)" in text


@pytest.mark.parametrize("module", ["ustc.ops.jit", "ustc.ops.einsum"])
def test_module_examples(module):
    """The examples in the front ends' docstrings (a Bellman-Ford step, a min-plus SpGEMM) run."""
    import doctest
    import importlib

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ustc.ConversionWarning)
        result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
