"""``ustc.Matmul``: ``alpha * op(a) @ op(b) + beta * c`` with a plan / execute split.

    >>> import numpy as np, ustc
    >>> A = ustc.Tensor.from_dense(np.diag([1., 2., 3.]), "CSR")
    >>> x = np.ones(3)
    >>> with ustc.Matmul(A, x) as mm:
    ...     mm.plan().plan_info.split(",")[0]
    ...     mm.execute().tolist()
    ...     x[:] = 2                      # operands may change in place between executes
    ...     mm.execute().tolist()
    'generated: cpu'
    [1.0, 2.0, 3.0]
    [2.0, 4.0, 6.0]

``plan()`` picks the route (a registered kernel, a library kernel, or generated
code; see :mod:`ustc.ops.routes`), compiles or loads its kernel and allocates
the output; ``execute()`` only computes, into that output, and returns it
(the same buffer every time; pass ``out=`` for another). Operands: ustc
Tensors, SciPy / torch / CuPy sparse objects (viewed zero-copy), dense NumPy,
torch or CuPy arrays; vectors, matrices and 3-D batches (NumPy ``matmul``
rules, a 2-D operand broadcast over the other's batch). The result is dense in
the dense operand's package, or a ustc Tensor when both operands are sparse
matrices (``options={"out_format": ...}``, default ``a``'s format).

Options: ``route`` (``"registered"``, ``"library"``, ``"generated"``: force
one), ``out_format`` (sparse results), ``target`` (``"cpu"``, ``"cuda"``;
default from the operands' device).
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError, UstcError
from ..tensor import packages
from ..tensor.tensor import Tensor, as_format
from . import operands as ops
from .routes import Route, choose

OPTIONS = ("route", "out_format", "target")
ROUTES = (None, "registered", "library", "generated")


@dataclass
class Bound:
    """Normalised operands of one product and the plan key they give."""

    a: object
    b: object
    c: object
    alpha: object
    beta: object
    problem: ops.Problem
    shape: tuple[int, ...]
    dtype: np.dtype
    package: str
    out_format: object = None     # TensorFormat of a sparse result


def bind(a, b, c, alpha, beta, transpose_a: bool, transpose_b: bool, options: dict) -> Bound:
    """Check and normalise operands; raises ShapeError / DeviceError / UstcError naming the operand."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise UstcError(f"matmul: unknown option {unknown[0]!r} (options: {', '.join(OPTIONS)})")
    if options.get("route") not in ROUTES:
        raise UstcError(f"matmul: route must be one of registered, library, generated; got {options['route']!r}")
    a1 = ops.transposed(ops.normalise(a, "a"), bool(transpose_a), "a")
    b1 = ops.transposed(ops.normalise(b, "b"), bool(transpose_b), "b")
    c1 = ops.normalise(c, "c")
    pa, pb = ops.package_of(a), ops.package_of(b)
    if not isinstance(a1, Tensor) and isinstance(b1, Tensor) and a1.ndim == 1 and b1.ndim == 2:
        a1, b1, pa, pb = ops.transposed(b1, True, "b"), a1, pb, pa   # x @ B is B^T @ x: a sparse-left SpMV
    sa, sb = ops.spec(a1, "a", pa), ops.spec(b1, "b", pb)
    sc = ops.spec(c1, "c") if c1 is not None else None
    device = ops.check_devices([sa, sb, sc])
    shape = ops.product_shape(sa, sb)
    if sc is not None and sc.shape != shape:
        raise ShapeError(f"matmul: c has shape {sc.shape}, the product has shape {shape}")
    alpha_kind, beta_kind = ops.scalar_kind(alpha, 1), ops.scalar_kind(beta, 0)
    dtypes = [sa.dtype, sb.dtype] + ([np.asarray(alpha).dtype] if alpha_kind != "one" else [])
    if sc is not None and beta_kind != "zero":
        dtypes += [sc.dtype, np.asarray(beta).dtype]
    out_format = None
    if sa.sparse and sb.sparse and len(shape) == 2:
        out_format = as_format(options.get("out_format") or _default_out_format(a1))
    target = options.get("target") or ("cuda" if device == "cuda" else "cpu")
    problem = ops.Problem(sa, sb, sc if beta_kind != "zero" else None, bool(transpose_a), bool(transpose_b),
                          alpha_kind, beta_kind, out_format.signature if out_format else None, options.get("route"),
                          target)
    dense = [s for s in (sa, sb) if not s.sparse]
    package = dense[0].package if dense else sa.package
    return Bound(a1, b1, c1 if beta_kind != "zero" else None, alpha, beta, problem, shape,
                 _result_type(tuple(ops.dtype_name(d) for d in dtypes)), package, out_format)


@functools.lru_cache(maxsize=256)
def _result_type(names: tuple[str, ...]) -> np.dtype:
    return np.result_type(*[np.dtype(d) for d in names])


def _default_out_format(a: Tensor):

    return a.format if a.format.holds_any_pattern and a.ndim == 2 else "CSR"


class Matmul:
    """A planned ``alpha * op(a) @ op(b) + beta * c`` (see the module docstring)."""

    def __init__(self, a, b, c=None, alpha=1, beta=0, *, transpose_a: bool = False, transpose_b: bool = False,
                 options: dict | None = None):
        self.options = dict(options or {})
        self._transposes = (bool(transpose_a), bool(transpose_b))
        self._raw = (a, b, c, alpha, beta)
        self._bound: Bound | None = bind(a, b, c, alpha, beta, *self._transposes, self.options)
        self.problem = self._bound.problem
        self._route: Route | None = None
        self._out = None
        self._lock = threading.RLock()
        self.plan_info: str | None = None
        self.plans = 0

    # -- life cycle ------------------------------------------------------------------------
    def __enter__(self) -> "Matmul":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def plan(self) -> "Matmul":
        """Choose the route, compile or load its kernel, allocate the output. Returns ``self``."""
        bound = self._require()
        route, why = choose(self.problem, bound.a, bound.b, bound.out_format)
        out = None if self.problem.out_format else self._allocate(bound)
        route.prepare(bound.a, bound.b, out, bound.alpha)
        self._route, self._out, self.plans = route, out, self.plans + 1
        self.plan_info = f"{route.info} [why: {why}]"
        return self

    def execute(self, *, out=None):
        """Compute into the planned output (or ``out``) and return it; plans first if needed."""
        with self._lock:
            if self._route is None:
                self.plan()
            bound = self._require()
            if self.problem.out_format:
                return self._sparse_result(bound)
            target = self._out if out is None else self._checked_out(out, bound)
            if bound.c is not None or not self._route.overwrites:
                self._fill(target, bound)
            self._route.run(bound.a, bound.b, target, bound.alpha)
            return self._wrap(target, bound)

    def reset_operands(self, a=None, b=None, c=None, alpha=None, beta=None) -> "Matmul":
        """New operands (or scalars) with the same formats, shapes, dtypes and device as planned;
        the Matmul's transposes apply to them as to the first ones."""
        self._require()
        raw = tuple(old if new is None else new for old, new in zip(self._raw, (a, b, c, alpha, beta)))
        new = bind(*raw, *self._transposes, self.options)
        if new.problem != self.problem:
            raise UstcError("reset_operands: the new operands differ from the planned ones in format, shape, "
                            "dtype, device or scalar kind; plan a new Matmul for them")
        self._raw, self._bound = raw, new
        return self

    def _adopt(self, raw: tuple, bound: Bound) -> None:
        """Take the operands of a one-shot call whose problem equals this plan's (plan cache)."""
        self._lock.acquire()
        self._raw, self._bound = raw, bound

    def _detach(self) -> None:
        """After a one-shot call: keep the plan, drop the operands, the output and kernel arguments."""
        if self._route is not None:
            self._route.unbind()
        self._raw = self._bound = self._out = None
        self._lock.release()  # taken by _adopt

    def release(self) -> None:
        """Drop the route, its kernels' arguments, the output and the operands."""
        if self._route is not None:
            self._route.release()
        self._route = self._out = self._bound = self._raw = None

    # -- helpers -----------------------------------------------------------------------------
    def _require(self) -> Bound:
        if self._bound is None:
            raise UstcError("this Matmul was released (or its operands were dropped); create a new one")
        return self._bound

    def _allocate(self, bound: Bound):
        if self.problem.target == "cuda" and self.problem.device == "cuda":
            import cupy

            return cupy.empty(bound.shape, dtype=bound.dtype)
        return np.empty(bound.shape, dtype=bound.dtype)

    def _checked_out(self, out, bound: Bound):
        arr = out if packages.is_cupy(out) else packages.host_array(out)
        if arr.shape != bound.shape or arr.dtype != bound.dtype:
            raise ShapeError(f"matmul: out has shape {tuple(arr.shape)} and dtype {arr.dtype}, "
                             f"expected {bound.shape} and {bound.dtype}")
        return arr

    def _fill(self, target, bound: Bound) -> None:
        if bound.c is None:
            target.fill(0)
            return
        c = bound.c.to_dense() if isinstance(bound.c, Tensor) else bound.c
        c = c if packages.is_cupy(c) else packages.host_array(c)
        if c is target:
            target *= bound.beta
        else:
            target[...] = c
            if bound.beta != 1:
                target *= bound.beta

    def _sparse_result(self, bound: Bound):
        result = self._route.run(bound.a, bound.b, None, bound.alpha)
        if bound.c is None:
            return result
        scaled = bound.c * bound.beta if bound.beta != 1 else bound.c
        return result + scaled

    def _wrap(self, target, bound: Bound):
        if target.ndim == 0 and bound.package != packages.TORCH:
            return target[()]
        return packages.wrap(target, bound.package)

