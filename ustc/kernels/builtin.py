"""The built-in registered kernels: DIA SpMV, delta(b) SpMV (MACKO-style), n:m structured SpMV and SpMM, CSR SpGEMM.

Each wrapper checks nothing the registry has not matched already except what
its ``supports`` hook declines (complex values for the Numba kernels are fine;
boolean or integer mixes are left to generated code). The wrappers read the
tensors' host buffers (``_buffers`` / ``_values``, NumPy views whatever package
the tensor came from), since Numba types NumPy arrays only. The Numba modules
are imported on first call, so importing the registry costs nothing.
"""

from __future__ import annotations

import functools

import numpy as np

from ..format.ir import TensorFormat
from ..format.levels import Delta, Dense
from .registry import register


def _plain(fmt: TensorFormat) -> TensorFormat:
    """``fmt`` without index widths (widths do not change how a kernel walks it)."""
    return TensorFormat(fmt.dims, fmt.levels) if (fmt.pos_width or fmt.crd_width) else fmt


def _numeric(a, b) -> bool:
    kinds = {np.dtype(a.dtype).kind, np.dtype(b.dtype).kind}
    return kinds <= {"f", "c"} and a.device == "cpu"


# -- DIA -------------------------------------------------------------------------------------
def _is_dia(fmt: TensorFormat) -> bool:
    from ..formats import DIAI, DIAJ

    return _plain(fmt) in (DIAI, DIAJ)


def _spmv(launch=None, *, overwrites: bool = False):
    """A registered SpMV from ``launch(a, b, out, alpha) -> (kernel, args)``. Calling it runs the
    kernel; its ``compile`` hook (which ``Matmul.plan`` calls) compiles, or loads from Numba's cache,
    the kernel for those argument types without running it. With ``overwrites`` ``launch`` takes a
    fifth argument, and the SpMV gets an ``overwrite`` twin (``launch(..., True)``: ``out = alpha *
    a @ b``, every element stored) that a route without ``c`` calls instead of zero-filling ``out``."""
    if launch is None:
        return lambda f: _spmv(f, overwrites=overwrites)

    def made(*mode):
        def fn(a, b, out, alpha):
            kernel, args = launch(a, b, out, alpha, *mode)
            kernel(*args)

        def compile_(a, b, out, alpha):
            import numba

            kernel, args = launch(a, b, out, alpha, *mode)
            kernel.compile(tuple(numba.typeof(x) for x in args))

        fn.compile = compile_
        fn.__name__, fn.__doc__ = launch.__name__, launch.__doc__
        return fn

    if not overwrites:
        return made()
    fn = made(False)
    fn.overwrite = made(True)
    return fn


def _dia_args(a, b, out, alpha, overwrite):
    """The DIA kernels' arguments: offsets, values, ``b``, ``out``, alpha in ``out``'s dtype, the
    shape, a diagonal's length and whether values are indexed by column (DIAJ)."""
    by_column = a.format.levels[1].expr == a.format.dims[1]
    diag_len = a.shape[1] if by_column else a.shape[0]
    pos, offsets = a.raw_buffers[(0, "pos")], a.raw_buffers[(0, "crd")]
    return (offsets[pos[0]:pos[1]], a.raw_values, b, out, out.dtype.type(alpha), a.shape[0], a.shape[1],
            diag_len, by_column, overwrite)


@register("spmv", _is_dia, "cpu", name="dia_spmv", builtin=True)
@_spmv(overwrites=True)
def dia_spmv(a, b, out, alpha, overwrite=False):
    """``out += alpha * a @ b`` for DIAI / DIAJ (``=`` with ``overwrite``): parallel row tiles,
    diagonals as 1-D streams (one thread below the generated kernels' serial threshold)."""
    from ..ops.runtime import SERIAL_WORK
    from ._dia import dia_spmv as parallel, dia_spmv_serial as serial

    kernel = serial if a.nse + b.size < SERIAL_WORK else parallel
    return kernel, _dia_args(a, b, out, alpha, overwrite)


dia_spmv.supports = _numeric


@register("spmm", _is_dia, "cpu", name="dia_spmm", builtin=True)
@_spmv(overwrites=True)
def dia_spmm(a, b, out, alpha, overwrite=False):
    """``out += alpha * a @ b`` (``b`` 2-D) for DIAI / DIAJ (``=`` with ``overwrite``): rows in parallel
    tasks, each row's diagonals adding rows of ``b`` into it in L1 (``ustc.kernels._dia``)."""
    from ..ops.runtime import SERIAL_WORK
    from ._dia import dia_spmm as parallel, dia_spmm_serial as serial

    kernel = serial if a.nse * max(1, b.shape[1]) + b.size < SERIAL_WORK else parallel
    return kernel, _dia_args(a, b, out, alpha, overwrite)


dia_spmm.supports = _numeric


# -- delta(b, packed) ------------------------------------------------------------------------
def _is_packed_delta_rows(fmt: TensorFormat) -> bool:
    if fmt.ndim != 2 or len(fmt.levels) != 2:
        return False
    row, col = fmt.levels
    return (row.type == Dense() and isinstance(col.type, Delta) and col.type.packed
            and row.expr == fmt.dims[0] and col.expr == fmt.dims[1])


@register("spmv", _is_packed_delta_rows, "cpu", name="delta_spmv", builtin=True)
@_spmv
def delta_spmv(a, b, out, alpha):
    """``out += alpha * a @ b`` for ``(i, j) -> (i : dense, j : delta(b, packed))``: each 32-bit word
    of gaps is loaded once and decoded in registers. (Plain ``delta(b)`` gaps take generated code,
    which measured faster than a hand-written walk.)"""
    from ._delta import packed_spmv

    kernel = packed_spmv(a.format.levels[1].type.bits)
    return kernel, (a.raw_buffers[(1, "pos")], a.raw_buffers[(1, "crd")], a.raw_values, b, out, out.dtype.type(alpha),
                    a.shape[0])


delta_spmv.supports = _numeric


# -- n:m structured --------------------------------------------------------------------------
@functools.lru_cache(maxsize=256)
def _nm(fmt: TensorFormat):
    """``(n, m)`` when ``fmt`` is ``Structured(n, m)`` (index widths aside), else None (cached: building
    ``Structured(n, m)`` to compare takes ~30 µs, and every launch asks)."""
    from ..format.levels.structured import Structured as StructuredLevel
    from ..formats import Structured

    if fmt.ndim != 2 or len(fmt.levels) != 3 or not isinstance(fmt.levels[2].type, StructuredLevel):
        return None
    level = fmt.levels[2].type
    return (level.n, level.m) if level.m and _plain(fmt) == Structured(level.n, level.m) else None


@register("spmv", lambda fmt: _nm(fmt) is not None, "cpu", name="structured_spmv", builtin=True)
@_spmv
def structured_spmv(a, b, out, alpha):
    """``out += alpha * a @ b`` for ``Structured(n, m)``: a row's slots in one flat loop, columns from
    compile-time ``n`` and ``m`` (``ustc.kernels._structured``)."""
    from ..ops.runtime import SERIAL_WORK
    from ._structured import nm_spmv

    n, m = _nm(a.format)
    groups = -(-a.shape[1] // m)
    return nm_spmv(n, m, a.nse + b.size >= SERIAL_WORK), (a.raw_buffers[(2, "crd")], a.raw_values, b, out, out.dtype.type(alpha), a.shape[0], groups,
                           a.shape[1])


def _structured_supports(a, b) -> bool:
    return _numeric(a, b) and a.raw_values.ndim == 1 and a.nse == a.shape[0] * -(-a.shape[1] // _nm(a.format)[1]) * \
        _nm(a.format)[0]


structured_spmv.supports = _structured_supports


@register("spmm", lambda fmt: _nm(fmt) is not None, "cpu", name="structured_spmm", builtin=True)
@_spmv
def structured_spmm(a, b, out, alpha):
    """``out += alpha * a @ b`` (``b`` 2-D) for ``Structured(n, m)``: a row's slots several at a time,
    each pass one loop over ``b``'s columns (``ustc.kernels._structured``)."""
    from ..ops.runtime import SERIAL_WORK
    from ._structured import nm_spmm

    n, m = _nm(a.format)
    groups = -(-a.shape[1] // m)
    return nm_spmm(n, m, a.nse * max(1, b.shape[1]) + b.size >= SERIAL_WORK), (a.raw_buffers[(2, "crd")], a.raw_values, b, out, out.dtype.type(alpha), a.shape[0], groups,
                           a.shape[1])


structured_spmm.supports = _structured_supports


# -- SpGEMM ----------------------------------------------------------------------------------
#: CSR whose rows are not sorted: asking for it as the out_format skips the per-row sort
CSR_UNORDERED = TensorFormat.parse("(i, j) -> (i : dense, j : compressed(nonordered))")


def _is_csr(fmt: TensorFormat) -> bool:
    from ..formats import CSR

    return _plain(fmt) == CSR


@register("spgemm", _is_csr, "cpu", name="csr_spgemm", builtin=True)
def csr_spgemm(a, b, out_format):
    """``a @ b`` for CSR ``a`` and ``b`` (Gustavson, parallel over chunks of equal work: ``_spgemm.product``), in ``out_format``
    (rows left unsorted when that is :data:`CSR_UNORDERED`).
    (No ``compile`` hook: the output's size is only known after the counting pass.)"""
    import numba

    from ..formats import CSR
    from ..tensor.tensor import Tensor
    from ._spgemm import product

    n_rows, n_cols = a.shape[0], b.shape[1]
    fmt = CSR_UNORDERED if _plain(out_format) == CSR_UNORDERED else CSR
    pos, crd, vals = product(a.raw_buffers[(1, "pos")], a.raw_buffers[(1, "crd")], a.raw_values, b.raw_buffers[(1, "pos")],
                             b.raw_buffers[(1, "crd")], b.raw_values, n_cols, np.result_type(a.dtype, b.dtype), fmt == CSR,
                             numba.get_num_threads())
    c = Tensor(fmt, (n_rows, n_cols), {(1, "pos"): pos, (1, "crd"): crd}, vals)
    return c if out_format == fmt else c.convert(out_format)


def _spgemm_supports(a, b) -> bool:
    from ..tensor.tensor import Tensor

    # the row markers are int32
    return isinstance(b, Tensor) and _is_csr(b.format) and _numeric(a, b) and a.shape[0] < 2**31 - 1


csr_spgemm.supports = _spgemm_supports
