"""Shared by the CUDA unit tests: a program compiled for the CUDA target from its text."""

from __future__ import annotations

import warnings

import ustc
from ustc.codegen import optimize
from ustc.codegen.compile import Operand, compile_program
from ustc.ops import library


def functions(text: str, formats: dict, dtype: str = "float64"):
    """``text`` compiled with CUDA tuning, every operand of ``dtype`` in its format from ``formats``
    (dense where absent); conversion warnings silenced."""
    program = library.parse_program(text)
    operands = {}
    for st in program.statements:
        for access in [st.lhs, *st.rhs.accesses()]:
            operands[access.tensor] = Operand(access.tensor, formats.get(access.tensor), len(access.indices), dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ustc.ConversionWarning)
        return compile_program(program, operands, ("test",), optimize.CUDA)
