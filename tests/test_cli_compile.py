"""``ustc compile``: named operations and --expr statements to source, LLVM IR and assembly."""

from __future__ import annotations

import doctest
import importlib.util
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ustc
from ustc import TensorFormat
from ustc.cli import main
from ustc.codegen import notation as nt
from ustc.codegen.plans import plans_of
from ustc.ops import library


@pytest.fixture(scope="module", autouse=True)
def _cache_dir(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("USTC_CACHE_DIR", str(tmp_path_factory.mktemp("kernels")))
        yield


def _compile(capsys, *argv) -> str:
    assert main(["compile", *argv]) == 0
    captured = capsys.readouterr()
    return captured.out


def _fails(capsys, *argv, status: int = 1) -> str:
    if status == 2:
        with pytest.raises(SystemExit) as info:
            main(["compile", *argv])
        assert info.value.code == 2
    else:
        assert main(["compile", *argv]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("usage:" if status == 2 else "ustc compile: error: ")
    return captured.err


def _signature(text: str) -> str:
    return TensorFormat.parse(text).signature


CASES = [(op, fmt) for op in ("spmv", "spmm", "sddmm") for fmt in ("CSR", "COO", "DIAI", "BSR(2, 2)",
                                                                     "Structured(2, 4)")]
CASES += [(op, fmt) for op in ("add", "mul") for fmt in ("CSR", "COO", "BSR(2, 2)", "CSF(3)")]
CASES += [("sum", fmt) for fmt in ("CSR", "DIAI", "Structured(2, 4)", "CSF(3)")]


@pytest.mark.parametrize("op, fmt", CASES)
def test_named_operation_source(capsys, op, fmt):
    out = _compile(capsys, fmt, "--op", op)
    assert out.startswith(f"# ustc compile {shlex.quote(fmt)} --op {op} --target cpu --dtype float64 ")
    assert "@njit" in out and "def kernel_0" in out
    assert _signature(fmt) in out
    assert "# index dtypes of A: " in out
    compile(out, f"<{op} {fmt}>", "exec")


@pytest.mark.parametrize("fmt, to", [("CSR", "CSC"), ("COO", "CSR"), ("DIAI", "CSR"), ("BSR(2, 2)", "COO"),
                                     ("CSR", "(i, j) -> (j : dense, i : compressed)")])
def test_convert_source(capsys, fmt, to):
    out = _compile(capsys, fmt, "--op", "convert", "--to", to)
    assert "@njit" in out and "def kernel_0" in out
    assert _signature(fmt) in out and _signature(to) in out
    assert "B[i, j] = A[i, j]" in out


def test_add_and_mul_take_a_second_format(capsys):
    out = _compile(capsys, "CSR", "CSC", "--op", "add")
    assert _signature("CSR") in out and _signature("CSC") in out
    assert "C[i, j] = A[i, j] + B[i, j]" in out
    out = _compile(capsys, "CSR", "COO", "--op", "mul")
    assert "C[i, j] = A[i, j] * B[i, j]" in out and _signature("COO") in out


def test_sum_over_an_axis(capsys):
    out = _compile(capsys, "CSR", "--op", "sum", "--axis", "1")
    assert "s[i] = A[i, j]" in out
    out = _compile(capsys, "CSF(3)", "--op", "sum", "--axis", "-1")
    assert "s[i, j] = A[i, j, k]" in out
    out = _compile(capsys, "CSR", "--op", "sum")
    assert "s[] = A[i, j]" in out
    assert "dense 0-D array" in out


def test_output_file_is_an_importable_module(capsys, tmp_path):
    target = tmp_path / "spmv_csr.py"
    assert main(["compile", "CSR", "--op", "spmv", "-o", str(target)]) == 0
    assert capsys.readouterr().out == ""
    text = target.read_text()
    assert text.startswith("# ustc compile CSR --op spmv")
    compile(text, str(target), "exec")
    spec = importlib.util.spec_from_file_location("ustc_compile_spmv_csr", target)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        assert module.PLAN[0]["function"] == "kernel_0"
        kinds = ["array", "pos", "crd", "vals", "array", "extent", "threads"]   # rows split per thread
        assert [p[0] for p in module.PLAN[0]["params"]] == kinds
        assert [r.kind for r in plans_of(module)[0].params] == kinds            # the typed plan reads it back
        dense = np.array([[1.0, 0, 2], [0, 0, 3], [4, 5, 0]])
        a = ustc.Tensor.from_dense(dense, "CSR")
        x, y = np.array([1.0, 2, 3]), np.zeros(3)
        module.kernel_0(y, a.pos(1), a.crd(1), a.values, x, 3, 2)
        np.testing.assert_allclose(y, dense @ x)
    finally:
        del sys.modules[spec.name]


def test_llvm_and_asm_for_csr_spmv(capsys, tmp_path):
    llvm = _compile(capsys, "CSR", "--op", "spmv", "--emit", "llvm")
    assert llvm.startswith("; ustc compile CSR --op spmv")
    assert "define" in llvm
    assert "; ---- kernel_0: y[i] = A[i, j] * x[j]" in llvm
    target = tmp_path / "spmv.s"
    assert main(["compile", "CSR", "--op", "spmv", "--emit", "asm", "-o", str(target)]) == 0
    asm = target.read_text()
    body = [line for line in asm.splitlines() if line and not line.startswith("#")]
    assert len(body) > 10
    assert "kernel_0" in asm


def test_asm_covers_every_statement_and_sparse_outputs(capsys):
    out = _compile(capsys, "--expr", "C[i, j] = A[i, j] * B[i, k] * D[k, j]", "--expr", "y[i] = C[i, j] * x[j]",
                   "--format", "A=CSR", "--format", "C=CSR", "--emit", "asm")
    assert "# ---- kernel_0: C[i, j] = A[i, j] * B[i, k] * D[k, j]" in out
    assert "# ---- kernel_1: y[i] = C[i, j] * x[j]" in out


def test_expr_sddmm(capsys):
    out = _compile(capsys, "--expr", "C[i,j] = A[i,j] * B[i,k] * D[k,j]", "--format", "A=CSR")
    assert "@njit" in out and "def kernel_0" in out
    assert "# op      : C[i, j] = A[i, j] * B[i, k] * D[k, j]" in out
    assert f"# A       : {_signature('CSR')} [float64]" in out
    assert "# C       : dense 2-D array [float64]" in out  # outputs are dense unless given a --format
    assert "# B       : dense 2-D array" in out and "# D       : dense 2-D array" in out
    out = _compile(capsys, "--expr", "C[i,j] = A[i,j] * B[i,k] * D[k,j]", "--format", "A=CSR",
                   "--format", "C=CSR")
    assert f"# C       : {_signature('CSR')} [float64]" in out


def test_expr_two_statements_accumulate_and_scalars(capsys):
    out = _compile(capsys, "--expr", "t[i] = A[i, j] * x[j]", "--expr", "y[i] += alpha * t[i] + B[i, j] * x[j]",
                   "--format", "A=DIAI", "--format", "B=COO", "--dtype", "float32")
    assert "def kernel_0" in out and "def kernel_1" in out
    assert "y[i] += alpha * t[i] + B[i, j] * x[j]" in out
    assert _signature("DIAI") in out and _signature("COO") in out
    assert "[float32]" in out


def test_index_dtype_and_shape(capsys):
    out = _compile(capsys, "CSR", "--op", "spmv", "--index-dtype", "int64", "--shape", "i=100", "--shape", "j=7")
    assert "# index dtypes of A: pos[1] int64, crd[1] int64" in out
    assert "# placeholders: zeros, i=100, j=7" in out
    key64 = next(line for line in out.splitlines() if line.startswith("# key"))
    out = _compile(capsys, "CSR", "--op", "spmv")
    assert "# index dtypes of A: pos[1] int32, crd[1] int32" in out
    assert next(line for line in out.splitlines() if line.startswith("# key")) != key64
    out = _compile(capsys, "DELTA(8)", "--op", "spmv", "--index-dtype", "int64")
    assert "crd[1] uint8" in out  # the format fixes its gap width


def test_block_formats_get_tiling_extents(capsys):
    out = _compile(capsys, "BSR(3, 5)", "--op", "spmv")
    assert "# placeholders: zeros, i=60, j=60" in out


def test_conversions_are_noted(capsys):
    out = _compile(capsys, "CSR", "CSC", "--op", "mul")
    assert "# note: kernel_0 first converts operand 'B'" in out


# -- errors ---------------------------------------------------------------------------------------

def test_bad_format_text_shows_the_caret(capsys, tmp_path):
    target = tmp_path / "never.py"
    err = _fails(capsys, "(i, j) -> (j : dense, i : compresed)", "--op", "spmv", "-o", str(target))
    assert "FORMAT 1: unknown level type 'compresed'" in err
    lines = err.splitlines()
    source = next(k for k, line in enumerate(lines) if "(i, j) -> (j : dense, i : compresed)" in line)
    assert lines[source + 1].index("^") == lines[source].index("compresed")
    assert not target.exists()
    err = _fails(capsys, "CSR", "--op", "convert", "--to", "(i, j) -> (j : dense")
    assert err.startswith("ustc compile: error: --to: ") and "^" in err


def test_operation_errors(capsys):
    assert "unknown operation 'spmx' (did you mean 'spmv'?)" in _fails(capsys, "CSR", "--op", "spmx")
    assert "convert needs --to FORMAT" in _fails(capsys, "CSR", "--op", "convert")
    assert "spmv takes 1 FORMAT, got 2" in _fails(capsys, "CSR", "CSC", "--op", "spmv")
    assert "spmv takes 1 FORMAT, got 0" in _fails(capsys, "--op", "spmv")
    assert "add takes 1 or 2 FORMATs, got 3" in _fails(capsys, "CSR", "CSR", "CSR", "--op", "add")
    assert "needs a 2-D format" in _fails(capsys, "CSF(3)", "--op", "spmv")
    assert "--to applies to convert only" in _fails(capsys, "CSR", "--op", "spmv", "--to", "CSC")
    assert "--axis 2 is out of range" in _fails(capsys, "CSR", "--op", "sum", "--axis", "2")
    assert "--axis applies to sum only" in _fails(capsys, "CSR", "--op", "add", "--axis", "0")
    assert "no index 'q'" in _fails(capsys, "CSR", "--op", "spmv", "--shape", "q=3")


def test_expr_errors(capsys):
    err = _fails(capsys, "--expr", "C[i,j] = A[i,j] / B[i,j]", "--format", "A=CSR")
    assert "<expr>:1:10: operator Div is not supported" in err
    err = _fails(capsys, "--expr", "y[i] = x[i]", "--expr", "C[i,j] = A[i,j] +* B[i,j]")
    assert "<expr>:2:" in err and "invalid syntax" in err and "^" in err
    assert "got import" in _fails(capsys, "--expr", "import os")
    assert "no tensor 'Q'" in _fails(capsys, "--expr", "y[i] = A[i,j] * x[j]", "--format", "Q=CSR")
    err = _fails(capsys, "--expr", "y[i] = A[i,j] * x[j]", "--format", "A=CSF(3)")
    assert "the format is 3-D but A is indexed with 2 indices" in err


def test_cuda_emits_source_or_ptx_only(capsys):
    assert "--target cuda emits source or ptx" in _fails(capsys, "CSR", "--op", "spmv", "--target", "cuda",
                                                         "--emit", "asm")
    assert "--emit ptx needs --target cuda" in _fails(capsys, "CSR", "--op", "spmv", "--emit", "ptx")


def test_usage_errors_exit_2(capsys):
    _fails(capsys, "CSR", "--op", "spmv", "--emit", "bytecode", status=2)
    _fails(capsys, "CSR", "--op", "spmv", "--target", "tpu", status=2)
    _fails(capsys, "CSR", status=2)
    assert "not both" in _fails(capsys, "CSR", "--op", "spmv", "--expr", "y[i] = x[i]", status=2)
    assert "belongs to --expr" in _fails(capsys, "CSR", "--op", "spmv", "--format", "A=CSR", status=2)
    assert "NAME=VALUE" in _fails(capsys, "--expr", "y[i] = A[i,j]*x[j]", "--format", "CSR", status=2)
    assert "positive integer" in _fails(capsys, "CSR", "--op", "spmv", "--shape", "i=0", status=2)


def test_in_a_real_process(tmp_path):
    script = Path(sys.executable).with_name("ustc")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "ustc.cli.main"]
    env = {**__import__("os").environ, "USTC_CACHE_DIR": str(tmp_path)}
    done = subprocess.run(command + ["compile", "CSR", "--op", "spmv"], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert "def kernel_0" in done.stdout
    done = subprocess.run(command + ["compile", "CSR", "--op", "spmv", "--target", "cuda", "--emit", "llvm"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "--target cuda emits" in done.stderr


# -- the library --------------------------------------------------------------------------------

def test_library_doctests():
    result = doctest.testmod(library)
    assert result.attempted > 0 and result.failed == 0


def test_operation_programs():
    program, formats, ranks = library.operation("sddmm", ["CSR"])
    assert str(program) == "C[i, j] = A[i, j] * B[i, k] * D[k, j]"
    assert formats["C"] == formats["A"] == TensorFormat.parse("CSR")
    assert formats["B"] is None and formats["D"] is None
    assert ranks == {"C": 2, "A": 2, "B": 2, "D": 2}
    program, formats, ranks = library.operation("mul", ["CSF(3)"])
    assert str(program) == "C[i, j, k] = A[i, j, k] * B[i, j, k]"
    assert formats["B"] == formats["A"] and ranks["C"] == 3
    program, formats, _ = library.operation("convert", ["COO"], to="CSC")
    assert str(program) == "B[i, j] = A[i, j]" and formats["B"] == TensorFormat.parse("CSC")
    with pytest.raises(ustc.UstcError, match="unknown operation"):
        library.operation("nope", ["CSR"])


def test_parse_expr_matches_jit():
    @ustc.jit
    def sddmm(C, A, B, D):
        C[i, j] += A[i, j] * B[i, k] * D[k, j]  # noqa: F821

    statement = library.parse_expr("C[i, j] += A[i, j] * B[i, k] * D[k, j]")
    assert statement == sddmm.program.statements[0]
    assert isinstance(statement.rhs, nt.Mul) and statement.accumulate
    with pytest.raises(ustc.KernelError, match="expected one statement"):
        library.parse_expr("y[i] = x[i]; z[i] = x[i]")
