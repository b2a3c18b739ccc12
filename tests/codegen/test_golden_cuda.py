"""Golden files of emitted CUDA kernels (``golden/cuda_<name>.py``), next to the CPU ones.

Same rules as ``test_golden.py``: review a diff, then ``pytest tests/codegen --update-golden``.
The schedule is fixed per case (no row statistics), so the files change only with the
generator.
"""

from __future__ import annotations

import warnings

import pytest

import ustc
from ustc.codegen import notation as nt
from ustc.codegen import optimize
from ustc.codegen.compile import Operand, compile_program
from ustc.codegen.cuda_schedule import choose_schedule
from ustc.codegen.emit_cuda import CudaEmitter
from ustc.codegen.plans import plans_text

from ustc.ops.convert import copy_program

from test_golden import GOLDEN, MUL, SPMV

F = ustc.formats
COPY = copy_program(2).statements[0]  # B[i0, i1] = A[i0, i1]: a conversion, written a thread per chunk

CASES = {
    "cuda_spmv_csr_warp8": (SPMV, {"A": F.CSR}, "warp_per_row:8"),
    "cuda_spmv_csc_atomic": (SPMV, {"A": F.CSC}, None),
    "cuda_spmv_diai": (SPMV, {"A": F.DIAI}, None),
    "cuda_spmv_coo": (SPMV, {"A": F.COO(2)}, None),
    "cuda_mul_csr_csc": (MUL, {"A": F.CSR, "B": F.CSC, "C": F.CSR}, None),
    "cuda_spmv_csr_merge_path": (SPMV, {"A": F.CSR}, "merge_path"),
    "cuda_spmv_bsr22_block_tile": (SPMV, {"A": F.BSR(2, 2)}, "block_tile:2"),
    "cuda_convert_coo_dcsr": (COPY, {"A": F.COO(2), "B": F.DCSR}, None),
}


def emitted(statement: nt.Statement, formats: dict, schedule) -> str:
    program = nt.Program((statement,))
    operands = {}
    for access in [statement.lhs, *statement.rhs.accesses()]:
        operands[access.tensor] = Operand(access.tensor, formats.get(access.tensor), len(access.indices), "float64")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ustc.ConversionWarning)
        module = compile_program(program, operands, ("golden file: " + str(statement),), optimize.CUDA)
    schedules = {fn.name: choose_schedule(fn, None, schedule) for fn in module.functions}
    return CudaEmitter().emit(module, schedules) + f"\n\n{plans_text(module.meta['plan'])}\n"


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_cuda(name, request):
    text = emitted(*CASES[name])
    path = GOLDEN / f"{name}.py"
    if request.config.getoption("--update-golden"):
        path.write_text(text)
    assert path.exists(), f"missing {path}; run pytest tests/codegen --update-golden"
    assert text == path.read_text(), f"{name}: emitted source changed; review and run --update-golden"
    compile(text, str(path), "exec")  # valid Python
