"""Golden files of emitted kernel source.

The emitted text of a handful of kernels is compared with ``golden/<name>.py``.
A change in the generator shows up here as a readable diff; after checking it,
refresh the files with ``pytest tests/codegen --update-golden`` (never
automatically). The header is fixed here (no cache key or versions), so the
files only change when the generated code does.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import ustc
from ustc.codegen import notation as nt
from ustc.codegen.compile import Operand, compile_program
from ustc.codegen.emit_cpu import CpuEmitter
from ustc.codegen.plans import plans_text

GOLDEN = Path(__file__).parent / "golden"
F = ustc.formats


def _a(name, *idx):
    return nt.Access(name, tuple(idx))


SPMV = nt.Statement(_a("y", "i"), nt.Mul(_a("A", "i", "j"), _a("x", "j")), True)
ADD = nt.Statement(_a("C", "i", "j"), nt.Add(_a("A", "i", "j"), _a("B", "i", "j")))
MUL = nt.Statement(_a("C", "i", "j"), nt.Mul(_a("A", "i", "j"), _a("B", "i", "j")))
SDDMM = nt.Statement(_a("C", "i", "j"), nt.Mul(nt.Mul(_a("A", "i", "j"), _a("B", "i", "k")), _a("D", "k", "j")))
COPY = nt.Statement(_a("B", "i", "j"), _a("A", "i", "j"))
SPGEMM = nt.Statement(_a("C", "i", "j"), nt.Mul(_a("A", "i", "k"), _a("B", "k", "j")))
MTTKRP = nt.Statement(_a("Y", "i", "j"), nt.Mul(nt.Mul(_a("B", "i", "k", "l"), _a("C", "k", "j")), _a("D", "l", "j")))

CASES = {
    "spmv_csr": (SPMV, {"A": F.CSR}),
    "spmv_csc": (SPMV, {"A": F.CSC}),
    "spmv_diai": (SPMV, {"A": F.DIAI}),
    "spmv_coo": (SPMV, {"A": F.COO(2)}),
    "spmv_bsr22": (SPMV, {"A": F.BSR(2, 2)}),
    "spmv_delta4_packed": (SPMV, {"A": F.DELTA(4, True)}),
    "add_csr_dcsr": (ADD, {"A": F.CSR, "B": F.DCSR, "C": F.CSR}),
    "mul_csr_csc": (MUL, {"A": F.CSR, "B": F.CSC, "C": F.CSR}),
    "sddmm_structured24": (SDDMM, {"A": F.Structured(2, 4), "C": F.Structured(2, 4)}),
    "mttkrp_csf3": (MTTKRP, {"B": F.CSF(3)}),
    "spmv_csr_overwrite": (nt.Statement(SPMV.lhs, SPMV.rhs, False), {"A": F.CSR}),  # y[i] = acc, no fill
    # conversions written in the target's own format (codegen.writer)
    "convert_csr_coo": (COPY, {"A": F.CSR, "B": F.COO(2)}),
    "convert_coo_dcsr": (COPY, {"A": F.COO(2), "B": F.DCSR}),
    "convert_csr_delta4_packed": (COPY, {"A": F.CSR, "B": F.DELTA(4, True)}),
    "add_csr_dcsr_into_dcsr": (ADD, {"A": F.CSR, "B": F.DCSR, "C": F.DCSR}),
    # written through a workspace: count, collect, sort each parent's segment, fill
    "convert_csr_bsr23": (COPY, {"A": F.CSR, "B": F.BSR(2, 3)}),
    "convert_coo_diai": (COPY, {"A": F.COO(2), "B": F.DIAI}),
    # reductions into a sparse output through a dense row (codegen.workspace); DCSR's k loop leapfrogs
    "spgemm_csr": (SPGEMM, {"A": F.CSR, "B": F.CSR, "C": F.CSR}),
    "spgemm_dcsr": (SPGEMM, {"A": F.DCSR, "B": F.DCSR, "C": F.DCSR}),
}


def emitted(statement: nt.Statement, formats: dict) -> str:
    program = nt.Program((statement,))
    operands = {}
    for st in program.statements:
        for access in [st.lhs, *st.rhs.accesses()]:
            operands[access.tensor] = Operand(access.tensor, formats.get(access.tensor), len(access.indices),
                                              "float64")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ustc.ConversionWarning)
        module = compile_program(program, operands, ("golden file: " + str(statement),))
    return CpuEmitter().emit(module) + f"\n\n{plans_text(module.meta['plan'])}\n"


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name, request):
    statement, formats = CASES[name]
    text = emitted(statement, formats)
    path = GOLDEN / f"{name}.py"
    if request.config.getoption("--update-golden"):
        path.write_text(text)
    assert path.exists(), f"missing {path}; run pytest tests/codegen --update-golden"
    assert text == path.read_text(), f"{name}: emitted source changed; review and run --update-golden"
    compile(text, str(path), "exec")  # valid Python
