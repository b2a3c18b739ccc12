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
(the same buffer every time; pass ``out=`` for another). As in nvmath-python,
a dense ``c`` is the output: ``c := alpha * a @ b + beta * c`` in place,
``beta`` 1 unless stated, ``execute()`` returns ``c`` itself and accumulates
again each time (``docs/ops.md``). The result dtype is the operands'; Python
or NumPy scalars never widen it. Operands: ustc
Tensors, SciPy / torch / CuPy sparse objects (viewed zero-copy), dense NumPy,
torch or CuPy arrays; vectors, matrices and 3-D batches (NumPy ``matmul``
rules, a 2-D operand broadcast over the other's batch). The result is dense in
the dense operand's package, or a ustc Tensor when both operands are sparse
matrices (``options={"out_format": ...}``, default ``a``'s format).

float16 and bfloat16 operands run in float32 on the CPU and give results of their own
dtype (:mod:`ustc.ops.narrow`): float16 through float32 twins made when the operands are
bound; bfloat16 (torch.bfloat16 tensors, dense, torch sparse or TorchUST, and
ml_dtypes.bfloat16 arrays or Tensors) through :func:`ustc.ops.narrow.bfloat16_product`'s
twins, refreshed before every execute, the float32 result rounded to nearest even (a dense
bfloat16 ``c`` updated in place and returned, a bfloat16 ``out=`` written; any other
bfloat16 result is a new array or tensor each execute).

Options: ``route`` (``"registered"``, ``"library"``, ``"generated"``: force
one), ``out_format`` (sparse results), ``target`` (``"cpu"``, ``"cuda"``;
default from the operands' device).

Fusion (nvmath-python's ``plan`` arguments): ``plan(prologs={"a": f, "b": g},
epilog=h, semiring="min_plus")`` computes ``c := h(c ⊕ ⊕_k f(a) ⊗ g(b))``:
prologs apply to the stored values of ``a`` and ``b`` as they are read, the
epilog to every element of a dense result (every entry of a sparse one) after
the fold into ``c``; a semiring (a name, :class:`ustc.Semiring` or dict)
replaces ``+`` and ``*`` (absent entries are its ``𝟘``, annihilating ⊗; without
``c`` the result starts at ``𝟘``; ``alpha`` and ``beta`` must be 1). Any of them
forces the generated route, which ``plan_info`` says.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError, UnsupportedOperation, UstcError
from ..tensor import packages
from ..tensor.tensor import Tensor, as_format
from . import narrow
from . import operands as ops
from ..codegen.functions import apply_inplace
from ..codegen.lower import stores_padding
from ..codegen.semiring import as_semiring
from .plan_call import ArrayLayout, PlannedCall
from .routes import NO_FUSION, Fusion, Route, choose, fusion

OPTIONS = ("route", "out_format", "target")
ROUTES = (None, "registered", "library", "generated")


@dataclass
class Bound:
    """Normalised operands of one product and the plan key they give."""

    a: object
    b: object
    c: object                     # what beta scales (None where beta is zero)
    alpha: object                 # cast to the result dtype
    beta: object
    problem: ops.Problem
    shape: tuple[int, ...]
    dtype: np.dtype
    package: str
    out_format: object = None     # TensorFormat of a sparse result
    inplace: object = None        # c's array (host or CuPy view), updated in place by execute()
    result: object = None         # what execute() returns when c is updated: c as the caller gave it
    result_dtype: np.dtype = None  # the caller's dtype: ``dtype`` unless float16 runs in float32
    refresh: tuple = ()           # (float16 source, float32 twin) pairs copied before each execute
    swapped: bool = False         # x @ B was bound as B^T @ x (a is b transposed, b is a)


def bind(a, b, c, alpha, beta, transpose_a: bool, transpose_b: bool, options: dict, semiring=None) -> Bound:
    """Check and normalise operands; raises ShapeError / DeviceError / UstcError naming the operand.

    ``beta=None`` means 1 when ``c`` is given, else 0. The result dtype is the operands'
    (``a``, ``b``, and ``c`` where it is read), never raised by a Python or NumPy scalar
    except to complex for a complex scalar (bool under an or / and ``semiring``); a dense
    ``c`` is the result's storage, so the result takes its dtype (refused where the
    operands' dtype cannot cast to it)."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise UstcError(f"matmul: unknown option {unknown[0]!r} (options: {', '.join(OPTIONS)})")
    if options.get("route") not in ROUTES:
        raise UstcError(f"matmul: route must be one of registered, library, generated; got {options['route']!r}")
    beta = (0 if c is None else 1) if beta is None else beta
    a1 = ops.transposed(ops.normalise(ops.dense_operand(a), "a"), bool(transpose_a), "a")
    b1 = ops.transposed(ops.normalise(ops.dense_operand(b), "b"), bool(transpose_b), "b")
    c1 = ops.normalise(ops.dense_operand(c), "c")   # a view: all-dense levels permute
    pa, pb = ops.package_of(a), ops.package_of(b)
    swapped = not isinstance(a1, Tensor) and isinstance(b1, Tensor) and a1.ndim == 1 and b1.ndim == 2
    if swapped:
        a1, b1, pa, pb = ops.transposed(b1, True, "b"), a1, pb, pa   # x @ B is B^T @ x: a sparse-left SpMV
    sa, sb = ops.spec(a1, "a", pa), ops.spec(b1, "b", pb)
    sc = ops.spec(c1, "c", ops.package_of(c)) if c1 is not None else None
    device = ops.check_devices([sa, sb, sc])
    shape = ops.product_shape(sa, sb)
    if sc is not None and sc.shape != shape:
        raise ShapeError(f"matmul: c has shape {sc.shape}, the product has shape {shape}")
    alpha_kind, beta_kind = ops.scalar_kind(alpha, 1), ops.scalar_kind(beta, 0)
    read_c = sc is not None and beta_kind != "zero"
    if any(ops.dtype_name(s.dtype) == "bfloat16" for s in (sa, sb, sc) if s is not None):
        narrow.require_bfloat16()   # read by CUDA kernels as it is (CPU ones come as float32 twins)
    dtype = _result_type(tuple(ops.dtype_name(s.dtype) for s in (sa, sb) + ((sc,) if read_c else ())),
                         _scalar_class(alpha, beta))
    if semiring is not None and semiring.logical:
        dtype = np.dtype(np.bool_)
    inplace = c1 if sc is not None and not sc.sparse else None
    if inplace is not None:
        dtype = _inplace_dtype(dtype, inplace)
    out_format = None
    if sa.sparse and sb.sparse and len(shape) == 2:
        out_format = as_format(options.get("out_format") or _default_out_format(a1))
    target = options.get("target") or ("cuda" if device == "cuda" else "cpu")
    result_dtype, refresh = dtype, ()
    if target == "cpu" and any(narrow.is_narrow(x) for x in (a1, b1, c1)):
        (a1, pa_), (b1, pb_), (c1, pc_) = (narrow.widen(x) for x in (a1, b1, c1))
        refresh = tuple(p for p in (pa_, pb_, pc_) if p is not None)
        sa, sb = ops.spec(a1, "a", sa.package), ops.spec(b1, "b", sb.package)
        sc = ops.spec(c1, "c", sc.package) if sc is not None else None
        dtype = narrow.compute_dtype(dtype)
    alpha_kind = alpha_kind if alpha_kind == "one" else dtype.name
    beta_kind = beta_kind if beta_kind == "zero" else dtype.name
    problem = ops.Problem(sa, sb, sc if read_c else None, bool(transpose_a), bool(transpose_b),
                          alpha_kind, beta_kind, out_format.signature if out_format else None, options.get("route"),
                          target, result_dtype.name)
    dense = [s for s in (sa, sb) if not s.sparse]
    package = dense[0].package if dense else sa.package
    scalar = np.float32 if dtype.name == "bfloat16" else dtype.type   # a bfloat16 kernel computes in float32
    return Bound(a1, b1, c1 if read_c else None, scalar(alpha), scalar(beta), problem, shape, dtype,
                 package, out_format, inplace, c if inplace is not None else None, result_dtype, refresh,
                 swapped=swapped)


def _scalar_class(*scalars) -> str:
    """The widest kind among the scalars ("bool" < "int" < "float" < "complex")."""
    kinds = {np.asarray(s).dtype.kind for s in scalars}
    return next(k for k, codes in (("complex", "c"), ("float", "f"), ("int", "iu"), ("bool", "b"))
                if kinds & set(codes) or k == "bool")


_WEAK = {"complex": 1j, "float": 1.0, "int": 1, "bool": True}


@functools.lru_cache(maxsize=256)
def _result_type(names: tuple[str, ...], scalars: str) -> np.dtype:
    """The operands' result dtype; a scalar changes only its kind (NumPy's weak Python scalars:
    float32 stays float32 under a float alpha, int64 becomes float64, real becomes complex)."""
    base = np.result_type(*[np.dtype(d) for d in names])
    if base.name == "bfloat16" and scalars != "complex":   # ml_dtypes' type: no weak-scalar rule of its own
        return base
    return np.result_type(base, _WEAK[scalars])


def _inplace_dtype(dtype: np.dtype, c) -> np.dtype:
    """The dtype of a product written into ``c``: c's own, where the operands' casts to it."""
    c_dtype = np.dtype(ops.dtype_name(c.dtype))
    if not np.can_cast(dtype, c_dtype, "same_kind"):
        raise UstcError(f"matmul: c ({c_dtype}) is updated in place and cannot hold the {dtype} product; "
                        f"pass c as {dtype}, or out= an array of that dtype")
    return c_dtype


def _default_out_format(a: Tensor):

    return a.format if a.format.holds_any_pattern and a.ndim == 2 else "CSR"


class Matmul:
    """A planned ``alpha * op(a) @ op(b) + beta * c`` (see the module docstring)."""

    def __init__(self, a, b, c=None, alpha=1, beta=None, *, transpose_a: bool = False, transpose_b: bool = False,
                 options: dict | None = None):
        self.options = dict(options or {})
        self._transposes = (bool(transpose_a), bool(transpose_b))
        self._raw = (a, b, c, alpha, beta)
        self._dtype_error: UstcError | None = None
        self._bf16 = _bfloat16_kinds(a, b, c)
        # bfloat16 on the CPU: float32 twins (None otherwise: CUDA kernels read bfloat16)
        self._wide = narrow.bfloat16_product(a, b, c, target=self.options.get("target"))
        a, b, c = self._wide.operands[:3] if self._wide is not None else (a, b, c)
        try:
            self._bound: Bound | None = bind(a, b, c, alpha, beta, *self._transposes, self.options)
        except UstcError as exc:   # a bool c holds what an or / and semiring, named at plan(), computes
            if not _bool_array(c):
                raise
            self._bound, self._dtype_error = bind(a, b, c, alpha, beta, *self._transposes, self.options,
                                                  semiring=as_semiring("or_and")), exc
        self.problem = self._bound.problem
        self._route: Route | None = None
        self._out = None
        self._lock = threading.RLock()
        self.plan_info: str | None = None
        self.plans = 0
        self._fusion: Fusion = NO_FUSION

    # -- life cycle ------------------------------------------------------------------------
    def __enter__(self) -> "Matmul":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def plan(self, *, prologs=None, epilog=None, semiring=None) -> "Matmul":
        """Choose the route, compile or load its kernel, allocate the output. Returns ``self``.

        ``prologs`` (``{"a": f, "b": g}``), ``epilog`` and ``semiring`` fuse into the product as
        the module docstring says; a call naming none of them keeps what an earlier ``plan``
        named. Raises UnsupportedOperation for what ustc does not fuse (a prolog on ``c``,
        alpha or beta other than 1 with a semiring, a forced non-generated route)."""
        if prologs is not None or epilog is not None or semiring is not None:
            self._fusion = fusion(prologs, epilog, semiring)
        if self._dtype_error is not None and not self._fusion.semiring.logical:
            raise self._dtype_error
        bound = self._require()
        self._check_fusion(bound)
        fused = self._fusion.swap() if bound.swapped else self._fusion
        route, why = choose(self.problem, bound.a, bound.b, bound.out_format, fused)
        out = None
        if not self.problem.out_format:
            out = bound.inplace if _direct(bound.inplace, bound.dtype) else self._allocate(bound)
        route.prepare(bound.a, bound.b, out, bound.alpha)
        self._route, self.plans = route, self.plans + 1
        self._out = None if out is bound.inplace else out
        self.plan_info = f"{route.info} [why: {why}]"
        return self

    def _check_fusion(self, bound: Bound) -> None:
        sr = self._fusion.semiring
        if sr.is_plus_times:
            return
        if bound.alpha != 1:
            raise UnsupportedOperation(f"matmul: alpha = {bound.alpha} with the semiring {sr.name}; alpha scales "
                                       f"plus-times products only (pass alpha=1)")
        if bound.c is not None and bound.beta != 1:
            raise UnsupportedOperation(f"matmul: beta = {bound.beta} with the semiring {sr.name}; c is folded in "
                                       f"with its add as it is (pass beta=1)")
        if isinstance(bound.c, Tensor) and not isinstance(bound.c, np.ndarray) and bound.inplace is None:
            raise UnsupportedOperation(f"matmul: a sparse c with the semiring {sr.name}; pass c dense")

    def execute(self, *, out=None):
        """Compute and return the result; plans first if needed.

        With a dense ``c`` and no ``out``: ``c := alpha * a @ b + beta * c`` in place, and the
        return value is ``c`` itself (each execute accumulates again). With ``out``: the
        result goes there and ``c`` is only read. Otherwise: the planned buffer (dense
        results, the same buffer every time) or a new Tensor (sparse results). bfloat16
        operands: ``out``, if given, must be bfloat16 where the result is (module docstring)."""
        with self._lock:
            wide = self._wide
            if wide is None:
                return self._execute(out)
            self._require()
            wide.refresh()
            bf16_result = isinstance(wide.result, str)
            if out is not None and (narrow.bfloat16_kind(out) is not None) != bf16_result:
                raise ShapeError(f"matmul: out has dtype {out.dtype}; the product of these operands is "
                                 f"{'bfloat16' if bf16_result else 'not bfloat16'}")
            if out is None or not bf16_result:
                return wide.finish(self._execute(out))
            scratch, store = narrow.wide_out(out)
            self._execute(scratch)
            store()
            return out

    def runner(self):
        """A callable computing the planned product into the plan's result buffer and returning that
        buffer (the array :meth:`execute` would wrap), for a caller that executes one plan many times
        on operand buffers it refills in place (``ustc.torch``'s batch-1 ``nn.Linear``). It runs the
        route alone (the route still checks what it keeps of the operands) where that is all
        :meth:`execute` does: a dense result of the compute dtype, no ``c``, no bfloat16 twins, no
        fusion; for any other plan it is :meth:`execute` itself. It takes no lock (the caller
        serialises calls) and is stale after :meth:`reset_operands` or :meth:`release`: ask again."""
        with self._lock:
            bound = self._require()
            if self._route is None:
                self.plan()
            if self._out is None and self._wide is None and not self.problem.out_format:
                self._out = self._allocate(bound)
            route, out = self._route, self._out
            if self._wide is not None or bound.refresh or bound.c is not None or bound.inplace is not None \
                    or out is None or self.problem.out_format or bound.result_dtype != bound.dtype \
                    or out.shape != bound.shape or self._fusion.active:
                return self.execute
            run, a, b, alpha = route.run, bound.a, bound.b, bound.alpha
            if route.overwrites:
                return functools.partial(run, a, b, out, alpha)  # no Python frame of its own

            def product():
                out.fill(0)  # the route adds into its output
                return run(a, b, out, alpha)
            return product

    def bind_call(self, b, out) -> PlannedCall | None:
        """A :class:`~ustc.ops.plan_call.PlannedCall` ``call(b2, out2, accumulate=False)`` computing
        ``out2 (+)= alpha * a @ b2`` for NumPy arrays of ``b``'s and ``out``'s shape, dtype and strides
        (``ustc.torch``'s batch-1 ``nn.Linear``: the call's own ``x``, a result it returns): the route's
        kernel on those arrays where it takes them (``Route.bind_call``), else through this plan's
        operand and output (the plan's ``b`` is then overwritten). None where :meth:`runner` would be
        :meth:`execute` itself (``c``, fusion, bfloat16 twins, a sparse result) or ``b`` / ``out`` are not
        host arrays of the planned shapes and dtype. Stale after :meth:`reset_operands` or :meth:`release`."""
        with self._lock:
            bound = self._require()
            if not (isinstance(b, np.ndarray) and isinstance(out, np.ndarray) and isinstance(bound.b, np.ndarray)) \
                    or b.shape != bound.b.shape or b.dtype != bound.b.dtype or out.shape != bound.shape \
                    or out.dtype != bound.dtype:
                return None
            runner = self.runner()
            if runner == self.execute:
                return None
            direct = self._route.bind_call(bound.a, b, out, bound.alpha)
            if direct is None and not bound.b.flags.writeable:
                return None
            staged = None if direct is not None else (bound.b, runner)
            at = None if direct is None else self._route.bind_address(bound.a, b, out, bound.alpha)
            return PlannedCall(self._lock, ArrayLayout.of(b), ArrayLayout.of(out), direct, staged, self._route.kind,
                               at)

    def _execute(self, out):
        """:meth:`execute` of operands ustc computes as they are (the caller holds the lock)."""
        bound = self._require()
        if out is None and bound.inplace is not None:
            _check_writable(bound.inplace)
        narrow.refresh(bound.refresh)
        if self._route is None:
            self.plan()
        if self.problem.out_format:
            return self._sparse_result(bound, out)
        user_out = None if out is None else self._checked_out(out, bound)
        if user_out is not None and user_out.dtype == bound.dtype:
            target = user_out
        elif out is None and _direct(bound.inplace, bound.dtype):
            target = bound.inplace
        else:
            if self._out is None:              # after a one-shot call's detach: a fresh buffer
                self._out = self._allocate(bound)
            target = self._out
        self._compute(target, bound)
        if user_out is not None:
            if target is not user_out:
                user_out[...] = target            # computed in float32 for a float16 out
            return self._wrap(user_out, bound)
        if bound.inplace is not None:
            if target is not bound.inplace:
                bound.inplace[...] = target       # c not C-contiguous, or float16: computed aside
            return bound.result
        if bound.result_dtype != bound.dtype:
            target = target.astype(bound.result_dtype)
        return self._wrap(target, bound)

    def _compute(self, target, bound: Bound) -> None:
        if bound.c is not None or not self._route.overwrites:
            self._fill(target, bound)
        self._route.run(bound.a, bound.b, target, bound.alpha)

    def reset_operands(self, a=None, b=None, c=None, alpha=None, beta=None) -> "Matmul":
        """New operands (or scalars) with the same formats, shapes, dtypes and device as planned;
        the Matmul's transposes apply to them as to the first ones."""
        if self._raw is None:
            raise UstcError("this Matmul was released; create a new one")
        raw = tuple(old if new is None else new for old, new in zip(self._raw, (a, b, c, alpha, beta)))
        if raw[0] is None or raw[1] is None:
            raise UstcError("reset_operands: the operands were released; give a and b (and c if planned with one)")
        differ = UstcError("reset_operands: the new operands differ from the planned ones in format, shape, "
                           "dtype, device or scalar kind; plan a new Matmul for them")
        if _bfloat16_kinds(*raw[:3]) != self._bf16:
            raise differ
        wide = narrow.bfloat16_product(*raw[:3], target=self.options.get("target"))   # new twins
        operands = wide.operands[:3] if wide is not None else raw[:3]
        new = bind(*operands, *raw[3:], *self._transposes, self.options, semiring=self._fusion.semiring)
        if new.problem != self.problem:
            raise differ
        self._raw, self._bound, self._wide = raw, new, wide
        if self._route is not None:
            self._route.unbind()   # what a route kept of the old operands (copies of their structure) goes
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
        self._route = self._out = self._bound = self._raw = self._wide = None

    free = release   # nvmath-python's name

    def release_operands(self) -> "Matmul":
        """Drop the operands (and the kernels' references to them) but keep the plan; give new
        ones with :meth:`reset_operands` (all of ``a``, ``b`` and, if planned with one, ``c``)."""
        with self._lock:
            if self._route is not None:
                self._route.unbind()
            self._raw = (None, None, None) + (self._raw[3:] if self._raw else (1, None))
            self._bound = self._wide = None
        return self

    def reset_operands_unchecked(self, a=None, b=None, c=None, alpha=None, beta=None) -> "Matmul":
        """nvmath-python's fast variant; ustc's checks are cheap, so this is :meth:`reset_operands`."""
        return self.reset_operands(a, b, c, alpha, beta)

    # -- helpers -----------------------------------------------------------------------------
    def _require(self) -> Bound:
        if self._bound is None:
            raise UstcError("this Matmul was released (or its operands were dropped); create a new one")
        bound = self._bound
        want = self._fusion.semiring.result_dtype(bound.dtype)
        if bound.inplace is None and bound.dtype != want:   # or / and semirings: bool results
            bound.dtype = want
            bound.result_dtype = want
        return bound

    def _allocate(self, bound: Bound):
        if self.problem.target == "cuda" and self.problem.device == "cuda":
            import cupy

            return cupy.empty(bound.shape, dtype=bound.dtype)
        return np.empty(bound.shape, dtype=bound.dtype)

    def _checked_out(self, out, bound: Bound):
        arr = out if packages.is_cupy(out) else packages.host_array(out)
        if arr.shape != bound.shape or arr.dtype != bound.result_dtype:
            raise ShapeError(f"matmul: out has shape {tuple(arr.shape)} and dtype {arr.dtype}, "
                             f"expected {bound.shape} and {bound.result_dtype}")
        return arr

    def _fill(self, target, bound: Bound) -> None:
        if bound.c is None:
            sr = self._fusion.semiring
            target.fill(0 if sr.add == "plus" else sr.identity(target.dtype))
            return
        c = bound.c.to_dense() if isinstance(bound.c, Tensor) else bound.c
        c = c if packages.is_cupy(c) else packages.host_array(c)
        if c is target:
            if bound.beta != 1:
                target *= bound.beta
        else:
            target[...] = c
            if bound.beta != 1:
                target *= bound.beta

    def _sparse_result(self, bound: Bound, out):
        """SpGEMM: a new Tensor, or written into a dense ``c`` (in place) or ``out``: added (folded
        with the semiring's add) to ``c``, then the epilog over every element."""
        result = self._route.run(bound.a, bound.b, None, bound.alpha)
        target = self._checked_out(out, bound) if out is not None else bound.inplace
        fused = self._fusion
        if target is None:
            if bound.c is not None:
                if fused.active:
                    raise UnsupportedOperation(f"matmul: {fused.describe()} with a sparse c; pass c dense")
                result = result + (bound.c * bound.beta if bound.beta != 1 else bound.c)
            return result if bound.result_dtype == bound.dtype else narrow.narrowed(result, bound.result_dtype)
        work = target if target.dtype == bound.dtype else np.empty(bound.shape, bound.dtype)  # float16: aside
        self._fold_sparse(result, work, bound, into_c=target is bound.inplace and work is target)
        if work is not target:
            target[...] = work
        return bound.result if out is None else self._wrap(target, bound)

    def _fold_sparse(self, result: Tensor, target, bound: Bound, into_c: bool) -> None:
        """``target := epilog(c ⊕ result)`` (``c`` scaled by beta; the semiring's 𝟘 without ``c``);
        ``into_c``: ``target`` already holds ``c``."""
        fused = self._fusion
        coords, values = result.entries()
        sr = fused.semiring
        if not sr.is_plus_times and stores_padding(result.format):   # stored zeros there are padding
            keep = values != 0
            coords, values = tuple(c[keep] for c in coords), values[keep]
        if bound.c is None:  # the route applied the epilog to the entries (distinct): the rest is h(zero)
            zero = 0 if sr.add == "plus" else sr.identity(target.dtype)
            target.fill(fused.epilog(zero) if fused.epilog is not None else zero)
            target[coords] = values
            return
        if not into_c:
            self._fill(target, bound)
        elif bound.beta != 1:
            target *= bound.beta
        if sr.is_plus_times:
            np.add.at(target, coords, values)
        elif sr.ufunc is not None:
            sr.ufunc.at(target, coords, values.astype(target.dtype, copy=False))
        else:
            for k, at in enumerate(zip(*coords)):
                target[at] = sr.combine(target[at], values[k])
        if fused.epilog is not None:   # the route left it to after the fold into c
            apply_inplace(fused.epilog, target)

    def _wrap(self, target, bound: Bound):
        if target.ndim == 0 and bound.package != packages.TORCH:
            return target[()]
        return packages.wrap(target, bound.package)


def _direct(c, dtype) -> bool:
    """A dense ``c`` a kernel can write directly (C-contiguous, writable, of the compute dtype)."""
    return c is not None and c.dtype == dtype and bool(c.flags.c_contiguous) \
        and (packages.is_cupy(c) or bool(c.flags.writeable))


def _bfloat16_kinds(*operands) -> tuple:
    """Which operands are CPU bfloat16 ones, and of which package (:func:`narrow.bfloat16_kind`)."""
    return tuple(narrow.bfloat16_kind(x) for x in operands)


def _bool_array(c) -> bool:
    """``c`` is a dense array of bools (of any package)."""
    try:
        return c is not None and np.dtype(ops.dtype_name(c.dtype)) == np.bool_
    except (AttributeError, TypeError):
        return False


def _check_writable(c) -> None:
    if isinstance(c, np.ndarray) and not c.flags.writeable:
        raise UstcError("matmul: c is read-only, but it is updated in place; pass a writable c, or out=")
