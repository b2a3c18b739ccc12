"""``ustc.matmul``: the one-shot form of :class:`ustc.Matmul`, through the plan cache.

``alpha * op(a) @ op(b) + beta * c`` for sparse and dense operands (see
:mod:`ustc.ops.plan`). A call whose operands match an earlier call's in
format, shape, dtypes, device, transposes and alpha/beta kind reuses that
plan and only executes. As in nvmath-python, a dense ``c`` is updated in
place and returned (``beta`` defaults to 1 when ``c`` is given); pass
``out=`` to leave ``c`` unchanged and receive the result there.
``prologs``, ``epilog`` and ``semiring`` are :meth:`ustc.Matmul.plan`'s; they
are part of the plan cache key. bfloat16 operands (torch, or ml_dtypes where
installed) run in float32 and give bfloat16 results (:mod:`ustc.ops.narrow`).

The plainest call, ``matmul(A, x)`` with a host Tensor ``A`` whose product is a
generated kernel and a NumPy ``x`` (no ``c``, scalars, transposes, options or
fusion), is also remembered by ``A``'s layout (:class:`Repeat`): a later call
with a tensor of that layout and an ``x`` of the same shape and dtype checks
the index dtypes and buffers (cached) and calls the kernel directly, in a few
microseconds (counted as a plan cache hit).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..formats import CSR
from ..kernels._race import KernelRace
from ..tensor import packages
from ..tensor.interop import plain_format
from ..tensor.storage import Layout
from ..tensor.tensor import Tensor
from . import narrow, plan_cache, runtime
from ._vector import csr_rows
from .operands import checked
from .plan import Bound, Matmul, bind
from .plan_cache import MATMUL, DirectCall, KernelPlan
from .routes import GeneratedRoute, NarrowColumnsRoute, SerialCsrRoute, fusion


def matmul(a, b, c=None, alpha=1, beta=None, *, transpose_a: bool = False, transpose_b: bool = False,
           options: dict | None = None, out=None, prologs=None, epilog=None, semiring=None):
    plain = c is None and out is None and beta is None and alpha.__class__ is int and alpha == 1 \
        and not (transpose_a or transpose_b or options or prologs or epilog or semiring)
    if plain and a.__class__ is Tensor:
        repeat = _REPEATS.get(id(a.layout))
        if repeat is not None and (y := repeat(a, b)) is not None:
            return y
    wide = narrow.bfloat16_product(a, b, c, out, (options or {}).get("target"))
    if wide is not None:  # bfloat16 has no NumPy dtype: float32 twins, the result rounded back (ops.narrow)
        a32, b32, c32, out32 = wide.operands
        return wide.finish(matmul(a32, b32, c32, alpha, beta, transpose_a=transpose_a, transpose_b=transpose_b,
                                  options=options, out=out32, prologs=prologs, epilog=epilog, semiring=semiring))
    options = dict(options or {})
    fused = fusion(prologs, epilog, semiring)
    bound = bind(a, b, c, alpha, beta, transpose_a, transpose_b, options, semiring=fused.semiring)
    key = (bound.problem, fused) if fused.active else bound.problem
    mm = plan_cache.get(key)
    if mm is None:
        mm = Matmul(a, b, c, alpha, beta, transpose_a=transpose_a, transpose_b=transpose_b, options=options)
        mm._adopt((a, b, c, alpha, beta), bound)
        mm._fusion = fused
        mm.plan()
        if plan_cache.stats()["maxsize"]:
            plan_cache.put(key, mm)
    else:
        mm._adopt((a, b, c, alpha, beta), bound)
    try:
        result = mm.execute(out=out)
        route = mm._route
    finally:
        mm._detach()
    if plain and MATMUL.enabled:
        _remember(a, b, bound, route)
    return result


@dataclass(frozen=True)
class Repeat:
    """A plain one-shot product ``A @ x`` remembered for ``A``'s layout (held strongly: its id
    keys :data:`_REPEATS` and cannot be reused while the entry lives; a Layout holds no
    buffer): the planned kernel (:class:`DirectCall`) and the kinds it was planned for — the
    values and index dtypes, device and package of ``A``, the shape and dtype of a NumPy ``x``
    — and the plan cache generation it belongs to (a cleared cache drops it)."""

    layout: Layout
    values: np.dtype
    index: tuple[tuple[tuple[int, str], np.dtype], ...]
    package: str
    b_shape: tuple[int, ...]
    b_dtype: np.dtype
    call: "DirectCall | SerialCsrCall"
    kernel: object
    generation: int

    def __post_init__(self):
        if self.call.inputs != ("A", "B"):
            raise ValueError("Repeat: the kernel must read A and B")

    def __call__(self, a: Tensor, b):
        """``a @ b`` when ``a`` and ``b`` are of the remembered kinds, else None."""
        if b.__class__ is not np.ndarray or b.shape != self.b_shape or b.dtype != self.b_dtype \
                or a.raw_values.dtype != self.values or a.device != "cpu" or a.package != self.package \
                or MATMUL.generation != self.generation:
            return None
        buffers = a.raw_buffers
        for key, dtype in self.index:
            if buffers[key].dtype != dtype:
                return None
        checked(a)                             # index buffers in bounds (cached per buffer set)
        MATMUL.count_hit()
        return self.call.run(self.kernel, a, b)


@dataclass(frozen=True)
class SerialCsrCall:
    """A small plain CSR SpMV (below ``runtime.SERIAL_WORK``) on the fused solvers' serial row loop
    (``ops._vector.csr_rows``) instead of the generated serial twin: 4,096-row
    stencil, alternating rounds, thread CPU time minimum 22.9-24.5 us against the twin's 32.2 and
    SciPy csr_matvec's 23.4 (load 17). ``n_rows`` rows of ``dtype``. Its row sums are raced
    (``race``, :class:`ustc.kernels._race.KernelRace`: the first six calls alternate, timed): masked
    8-lane steps won on an Intel Xeon, two interleaved sums on an AMD EPYC (Zen 4: 20.2 against 11.7
    us on that stencil); results of the two differ in the last bits."""

    n_rows: int
    dtype: np.dtype
    inputs: tuple[str, ...] = ("A", "B")
    race: KernelRace = field(default_factory=KernelRace, compare=False)

    def run(self, kernel, a: Tensor, b: np.ndarray) -> np.ndarray:
        out = np.empty(self.n_rows, self.dtype)
        buffers = a.raw_buffers
        self.race.timed(self._rows, kernel, buffers[(1, "pos")], buffers[(1, "crd")], a.raw_values, b, out)
        return out

    def _rows(self, pairs: int, kernel, pos, crd, vals, b, out) -> None:
        kernel(pos, crd, vals, b, out, 0, self.n_rows, None, self.dtype.type(0), bool(pairs))


SERIAL_CSR_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


def _serial_csr(a: Tensor, b: np.ndarray, bound: Bound, work: int) -> SerialCsrCall | None:
    """:class:`SerialCsrCall` for a plain CSR ``a @ b`` below ``runtime.SERIAL_WORK`` with one
    floating dtype throughout and int32 / int64 indices, else None."""
    if work >= runtime.SERIAL_WORK or b.ndim != 1 or plain_format(a.format) != CSR \
            or not (a.raw_values.dtype == b.dtype == bound.dtype) or bound.dtype not in SERIAL_CSR_DTYPES \
            or set(a.raw_buffers) != {(1, "pos"), (1, "crd")} \
            or any(buf.dtype.type not in (np.int32, np.int64) for buf in a.raw_buffers.values()):
        return None
    return SerialCsrCall(a.shape[0], bound.dtype)


_REPEATS: dict[int, Repeat] = {}
_REPEATS_LIMIT = 64


def _remember(a, b, bound: Bound, route) -> None:
    """Remember a plain ``a @ b`` (dense NumPy result of a generated kernel, no narrow dtypes)
    for :class:`Repeat`; anything else is not remembered. A one-shot call never keeps narrow column
    indices, so a :class:`NarrowColumnsRoute`'s generated kernel is what a repeat runs (a
    :class:`SerialCsrRoute`'s too: the repeat's own small CSR call where it takes the operand)."""
    route = route.inner if isinstance(route, (NarrowColumnsRoute, SerialCsrRoute)) else route
    if not (isinstance(route, GeneratedRoute) and a.__class__ is Tensor and b.__class__ is np.ndarray
            and a.device == "cpu" and not bound.swapped and bound.inplace is None and not bound.refresh
            and bound.problem.out_format is None and bound.result_dtype == bound.dtype
            and bound.package == packages.NUMPY and bound.a is a and bound.b is b and bound.shape):
        return
    out = np.empty(bound.shape, bound.dtype)
    run = runtime.prepare(route.program, {"A": a, "B": b, "C": out}, bound.problem.target)
    if run.target != "cpu":
        return
    run.load()
    plan = KernelPlan.of(route.program, run)
    if plan.direct is None or plan.direct.inputs != ("A", "B"):
        return
    index = tuple((key, buf.dtype) for key, buf in a.raw_buffers.items())
    work = a.nse + b.size                      # fixed for these kinds (same layout and buffers' shapes)
    if len(_REPEATS) >= _REPEATS_LIMIT:
        _REPEATS.clear()
    serial = _serial_csr(a, b, bound, work)
    call, kernel = (serial, csr_rows) if serial is not None else (plan.direct, plan.direct.kernel(work))
    _REPEATS[id(a.layout)] = Repeat(a.layout, a.raw_values.dtype, index, a.package, b.shape, b.dtype, call, kernel,
                                     MATMUL.generation)
