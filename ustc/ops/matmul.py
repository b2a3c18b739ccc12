"""``ustc.matmul``: ``alpha * a @ b + beta * c`` through a generated kernel.

``a`` and ``b`` are ustc Tensors or dense arrays (matrices or vectors, NumPy
rules for 1-D operands); the result is a NumPy array, or a ustc Tensor in
``a``'s format when both operands are sparse matrices. ``c`` (dense) is not
modified unless it is also passed as ``out``.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..tensor import packages
from ..tensor.tensor import Tensor
from ..codegen import notation as nt
from . import runtime


def matmul(a, b, c=None, alpha=1, beta=0, *, out=None, target: str = "cpu"):
    a_t, b_t = (x if isinstance(x, Tensor) else packages.host_array(x) for x in (a, b))
    if a_t.ndim not in (1, 2) or b_t.ndim not in (1, 2):
        raise ShapeError(f"matmul takes matrices and vectors, got {a_t.ndim}-D and {b_t.ndim}-D operands")
    ai = ("i", "k") if a_t.ndim == 2 else ("k",)
    bi = ("k", "j") if b_t.ndim == 2 else ("k",)
    oi = tuple(x for x in ai if x != "k") + tuple(x for x in bi if x != "k")
    if a_t.shape[-1] != b_t.shape[0]:
        raise ShapeError(f"matmul: a has {a_t.shape[-1]} columns but b has {b_t.shape[0]} rows "
                         f"(shapes {tuple(a_t.shape)} and {tuple(b_t.shape)})")
    shape = tuple(a_t.shape[:-1]) + tuple(b_t.shape[1:])
    rhs: nt.Expr = nt.Mul(nt.Access("A", ai), nt.Access("B", bi))
    bindings = {"A": a_t, "B": b_t}
    if alpha != 1:
        rhs, bindings["alpha"] = nt.Mul(nt.Scalar("alpha"), rhs), alpha
    both_sparse = isinstance(a_t, Tensor) and isinstance(b_t, Tensor)
    dtype = np.result_type(a_t.dtype, b_t.dtype, *([np.asarray(alpha).dtype] if alpha != 1 else []))
    if both_sparse and a_t.ndim == 2 and b_t.ndim == 2 and c is None:
        bindings["C"] = a_t.format
        program = nt.Program((nt.Statement(nt.Access("C", oi), rhs),))
        return runtime.execute(program, bindings, target)["C"]
    result = out if out is not None else np.zeros(shape, dtype=dtype)
    result = packages.host_array(result)
    if tuple(result.shape) != shape:
        raise ShapeError(f"matmul: out has shape {tuple(result.shape)}, expected {shape}")
    if c is not None and beta != 0:
        c_arr = c.to_dense() if isinstance(c, Tensor) else packages.host_array(c)
        if tuple(c_arr.shape) != shape:
            raise ShapeError(f"matmul: c has shape {tuple(c_arr.shape)}, expected {shape}")
        np.multiply(c_arr, beta, out=result, casting="unsafe")
    elif out is not None:
        result.fill(0)
    bindings["C"] = result
    program = nt.Program((nt.Statement(nt.Access("C", oi), rhs, accumulate=True),))
    return runtime.execute(program, bindings, target)["C"]
