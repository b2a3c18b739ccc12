"""The names of ``nvmath.sparse`` that ustc provides, and ``ust`` (this package)."""

import ustc.ust as ust  # noqa: F401

from .matmul import (ComputeType, ExecutionCPU, ExecutionCUDA, Matmul, MatmulOptions,  # noqa: F401
                     compile_matmul_add, compile_matmul_atomic_add, compile_matmul_epilog, compile_matmul_mul,
                     compile_matmul_prolog, matmul, matmul_matrix_qualifiers_dtype)
