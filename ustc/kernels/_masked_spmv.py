"""CSR SpMV whose rows are read in masked 8-lane vectors: no branch on a row's length below 9.

On a power-law graph most rows are short (2^20 rows, 15.6M entries: median 6, 70% of rows at most
8 entries) and their lengths are random, so a row loop (:func:`kernels._narrow_spmv.gather_spmv`)
mispredicts its exit about once a row, and LLVM's vectorised body never runs on rows shorter than
its unrolled width. Here every row starts with one masked step of 8 lanes (a masked load of its
values and column indices, a masked gather of ``x``, one FMA): lanes past the row's end are neither
read nor summed, so a row of up to 8 entries costs the same instructions whatever its length, and
longer rows loop in steps of 8 into the same vector. The row's sum is the vector's lanes added as a
tree (the order differs from a sequential sum, as ``gather_spmv``'s reassociation does).

Power-law graph, x in L1 (columns masked to 1,024): 19 ms a product against 29 for ``gather_spmv``
(one thread, CPU time); with the graph's own columns both wait on memory. :func:`masked_spmv` therefore
prefetches, every step, into L2 (``prefetcht1``: L1 keeps too few misses in flight) the lines of ``vals``
and ``crd`` :data:`AHEAD` + :data:`STREAM_AHEAD` entries on and, where ``x`` is larger than
:data:`X_RESIDENT` (so misses L2), the lines of ``x`` that the :data:`LANES` entries :data:`AHEAD` on
will gather, 8 every step whatever the row's length (a loop over exactly the step's entries mispredicted
its exit about once a row: 7-15% more CPU time). AMD EPYC (Zen 4, 1 MB L2 a core, 32 MB L3), half the
bench_peers power-law graph (7.8M entries, ``x`` 8 MB) on one thread, CPU time, alternating rounds:
16.5 ms with the lines of ``x`` prefetched into L1 only, 12.9 with the streams' too (non-temporally,
load ~1); ``x``'s into L2 instead of L1 14.1 -> 12.0 (load ~2; distances 128-384 alike, 64 worse); the
streams' into L2 instead of non-temporally 11.8 -> 11.1 (load ~1.2; beside a process streaming 128 MB:
12.2 -> 11.7; stream distances 128-1024 alike). The prefetch of ``x`` matters from about 8 MB (the
graph's columns hashed over ``x`` of 2^k entries, load ~1.1: 8 MB 11.1 ms against 18.7 without, 16 MB
(earlier kernel) 22.8 against 41.1, 64 MB 37.9 against 52.2) and costs below (4 MB: 10.7 against 10.5,
1 MB: 10.1 / 9.8, 128 KB: 9.4 / 7.8: :data:`X_RESIDENT` is L2's size, 1-4 MB within 3%); on the
graph's own columns the whole graph at one thread took 23.6 ms with it against 39.0 without (load ~1).

AVX-512 only (:data:`kernels._simd.HAS_AVX512`): without it the masked gather is a scalar sequence.
Values, ``x`` and ``y`` must share one dtype of :data:`DTYPES`; indices int32 or int64.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.extending import intrinsic, overload

from ..cache._lean import njit_cached
from ._prefetch import prefetch_outer
from ._simd import HAS_AVX512, Vec, _pointer, _wide, call_llvm, splat_ir
from ._spgemm import U

LANES = 8
#: entries ahead whose lines of ``x`` :func:`masked_spmv` prefetches where ``x`` exceeds :data:`X_RESIDENT`:
#: the out-of-order window alone keeps too few of its misses in flight
AHEAD = 128
#: entries past :data:`AHEAD` whose lines of ``vals`` and ``crd`` :func:`masked_spmv` prefetches
STREAM_AHEAD = 256
#: bytes of ``x`` up to which its gathers are not prefetched: it stays in L2 (1 MB a core on the AMD EPYC)
X_RESIDENT = 1 << 20
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
INDICES = (np.dtype(np.int32), np.dtype(np.int64))


def _element(ty) -> tuple[str, int]:
    """LLVM's overload name of a scalar type (``f64``, ``i32``) and its size in bytes."""
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}", ty.width // 8
    return ("f64", 8) if isinstance(ty, ir.DoubleType) else ("f32", 4)


def _masked_load(builder, pointer, vty, mask):
    """The lanes of ``vty`` from ``pointer`` on where ``mask`` is set, zero elsewhere (nothing read there)."""
    name, size = _element(vty.element)
    return call_llvm(builder, f"llvm.masked.load.v{vty.count}{name}.p0", vty,
                      [builder.bitcast(pointer, vty.as_pointer()), ir.Constant(ir.IntType(32), size), mask,
                       ir.Constant(vty, None)])


def masked_gather(builder, pointers, vty, mask):
    """The lanes of ``vty`` read through ``pointers`` (one a lane) where ``mask`` is set, zero elsewhere
    (nothing read there)."""
    name, size = _element(vty.element)
    return call_llvm(builder, f"llvm.masked.gather.v{vty.count}{name}.v{vty.count}p0", vty,
                     [pointers, ir.Constant(ir.IntType(32), size), mask, ir.Constant(vty, None)])


class _LanePointers(ir.Instruction):
    """``getelementptr element, base, <n x i64> index``: one pointer a lane from a scalar base. llvmlite's
    ``gep`` takes no vector index; as a GEP of a base (not integer addresses) the gather below selects
    ``vgatherdpd (base, ymm index, 8)`` on int32 columns: no shift, add or widening of the addresses."""

    def __init__(self, block, base, index, element):
        super().__init__(block, ir.VectorType(element.as_pointer(), index.type.count), "getelementptr",
                         [base, index])
        self.element = element

    def descr(self, buf):
        base, index = self.operands
        buf.append(f"getelementptr {self.element}, {base.type} {base.get_reference()}, "
                   f"{index.type} {index.get_reference()}\n")


def lane_pointers(builder, base, index, element):
    """The pointers ``base + index[k]`` (elements of ``element``) of every lane ``k``."""
    instruction = _LanePointers(builder.block, base, index, element)
    builder._insert(instruction)
    return instruction


@intrinsic
def row_step(typingctx, acc, vals, crd, x, p, count):
    """``acc + vals[p : p + count] * x[crd[p : p + count]]`` lane by lane, ``count`` at most
    :data:`LANES`; lanes at and past ``count`` add zero and read nothing (masked loads and gather)."""
    if not (isinstance(acc, Vec) and acc.lanes == LANES and vals.dtype == x.dtype == acc.dtype
            and isinstance(crd.dtype, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        acc_v, vals_a, crd_a, x_a, p_v, count_v = args
        vty = acc_v.type
        i64 = ir.IntType(64)
        count = builder.sext(count_v, i64) if count_v.type.width < 64 else count_v
        mask = builder.icmp_unsigned("<", ir.Constant(ir.VectorType(i64, LANES), list(range(LANES))),
                                     splat_ir(builder, count, LANES))
        values = _masked_load(builder, _pointer(context, builder, sig.args[1], vals_a, p_v), vty, mask)
        cty = ir.VectorType(context.get_value_type(sig.args[2].dtype), LANES)
        cols = _masked_load(builder, _pointer(context, builder, sig.args[2], crd_a, p_v), cty, mask)
        if cty.element.width < 64:  # unsigned columns (a narrow uint16 copy) widen with zeros
            widen = builder.sext if sig.args[2].dtype.signed else builder.zext
            cols = widen(cols, ir.VectorType(i64, LANES))
        pointers = lane_pointers(builder, _pointer(context, builder, sig.args[3], x_a, ir.Constant(i64, 0)), cols,
                                  vty.element)
        gathered = masked_gather(builder, pointers, vty, mask)
        return call_llvm(builder, f"llvm.fma.v{LANES}{_element(vty.element)[0]}", vty, [values, gathered, acc_v])

    return acc(acc, vals, crd, x, p, count), codegen


@intrinsic
def zeros_like_lanes(typingctx, y):
    """A vector of :data:`LANES` zeros of ``y``'s dtype (``y`` an array or a scalar)."""
    vec = Vec(y.dtype if isinstance(y, types.Array) else y, LANES)

    def codegen(context, builder, sig, args):
        return ir.Constant(context.get_value_type(vec), None)

    return vec(y), codegen


@intrinsic
def lane_sum(typingctx, v):
    """The sum of ``v``'s lanes, added as a tree (halves, then quarters, ...)."""

    def codegen(context, builder, sig, args):
        _wide(builder)
        a, n, i32 = args[0], LANES, ir.IntType(32)
        while n > 1:
            h = n // 2
            low = builder.shuffle_vector(a, a, ir.Constant(ir.VectorType(i32, h), list(range(h))))
            high = builder.shuffle_vector(a, a, ir.Constant(ir.VectorType(i32, h), list(range(h, n))))
            a, n = builder.fadd(low, high), h
        return builder.extract_element(a, ir.Constant(i32, 0))

    return v.dtype(v), codegen


def row_sum(vals, crd, x, begin, end, zero):
    """``sum_p vals[p] * x[crd[p]]`` over ``begin <= p < end`` (``zero`` gives the sum's type): in
    masked 8-lane steps where the host has AVX-512, ``vals``, ``x`` and ``zero`` share a float
    dtype and the arrays are C-contiguous (a tree sum of the lanes), else in two interleaved sums (one chain waits on the add
    latency). Chosen when the caller compiles; inlined into its row loop."""


@overload(row_sum, inline="always")
def _row_sum(vals, crd, x, begin, end, zero):
    if HAS_AVX512 and vals.dtype == x.dtype == zero and zero in (types.float32, types.float64) \
            and vals.layout == crd.layout == x.layout == "C":   # vector loads and gathers of contiguous arrays
        def masked(vals, crd, x, begin, end, zero):
            acc = row_step(zeros_like_lanes(zero), vals, crd, x, begin, min(end - begin, LANES))
            p = begin + LANES
            while p < end:
                acc = row_step(acc, vals, crd, x, p, min(end - p, LANES))
                p += LANES
            return lane_sum(acc)
        return masked

    def two_sums(vals, crd, x, begin, end, zero):
        a, b, p = zero, zero, begin
        while p + 1 < end:
            a += vals[U(p)] * x[U(crd[U(p)])]
            b += vals[U(p + 1)] * x[U(crd[U(p + 1)])]
            p += 2
        if p < end:
            a += vals[U(p)] * x[U(crd[U(p)])]
        return a + b
    return two_sums


@njit_cached(nogil=True, inline="always")
def _prefetch_ahead(x, crd, vals, q, last, gather_ahead):
    """Prefetches into L2 the lines of ``vals`` and ``crd`` at entry ``q + STREAM_AHEAD`` where that is
    below ``last``, and where ``gather_ahead`` and ``q < last`` those of ``x[crd[k]]`` for the
    :data:`LANES` entries ``k`` from ``q`` on (past ``last - 1`` taken as ``last - 1``, which only the
    chunk's last :data:`STREAM_AHEAD` entries need: no clamp on the others, 13-19% of the CPU time of
    the x-in-L1 power-law half at load ~3). A fixed count: no branch on a row's length."""
    if q + STREAM_AHEAD < last:
        prefetch_outer(vals, U(q + STREAM_AHEAD))
        prefetch_outer(crd, U(q + STREAM_AHEAD))
        if gather_ahead:
            for k in range(LANES):
                prefetch_outer(x, U(crd[U(q + k)]))
    elif gather_ahead and q < last:
        for k in range(LANES):
            prefetch_outer(x, U(crd[U(min(q + k, last - 1))]))


@njit_cached(nogil=True, parallel=True)
def masked_spmv(y, pos, starts, crd, vals, x, bounds, alpha, accumulate, gather_ahead):
    """``y[i] (+)= alpha * sum_p vals[p] * x[crd[p]]`` over row ``i``'s entries ``[pos[i], pos[i + 1])``,
    row chunks ``bounds`` in parallel, chunk ``ch`` holding the entries ``[starts[ch], starts[ch + 1])``.
    Same contract as ``kernels._narrow_spmv.gather_spmv`` with ``scale = 0``: the caller guarantees the
    pointers are increasing, every column lies in ``x`` and ``vals`` holds every entry; ``accumulate``
    False stores every ``y[i]`` (empty rows get zero). ``vals``, ``x`` and ``y`` share one dtype of
    :data:`DTYPES` (:func:`fits`): each row is summed in masked 8-lane steps (as :func:`row_sum`), and
    every step prefetches the lines of ``vals`` and ``crd`` ahead and, where ``gather_ahead``
    (:func:`gathers_ahead`), those of ``x`` that the :data:`LANES` entries :data:`AHEAD` on will gather
    (within the chunk; the cursor moves by the step's entries, so short rows prefetch some twice)."""
    zero = y.dtype.type(0)
    for ch in prange(len(bounds) - 1):
        end = np.int64(starts[U(ch)])
        last, q = np.int64(starts[U(ch + 1)]), end + AHEAD
        for i in range(bounds[ch], bounds[ch + 1]):
            begin = end
            end = np.int64(pos[U(i + 1)])
            acc, p = zeros_like_lanes(zero), begin
            while True:   # one step even for an empty row: its lanes read nothing
                count = min(end - p, LANES)
                _prefetch_ahead(x, crd, vals, q, last, gather_ahead)
                q += count
                acc = row_step(acc, vals, crd, x, p, count)
                p += LANES
                if p >= end:
                    break
            total = lane_sum(acc)
            if accumulate:
                y[U(i)] += alpha * total
            else:
                y[U(i)] = alpha * total


def gathers_ahead(x: np.ndarray) -> bool:
    """Whether :func:`masked_spmv` should prefetch the lines of ``x`` it gathers: ``x`` is larger than
    :data:`X_RESIDENT`."""
    return x.nbytes > X_RESIDENT


def fits(y: np.ndarray, pos: np.ndarray, crd: np.ndarray, vals: np.ndarray, x: np.ndarray) -> bool:
    """Whether :func:`masked_spmv` takes these arrays on this host: AVX-512, ``vals``, ``x`` and ``y``
    C-contiguous of one dtype of :data:`DTYPES`, ``pos`` and ``crd`` int32 / int64."""
    return HAS_AVX512 and vals.dtype == x.dtype == y.dtype and vals.dtype in DTYPES \
        and pos.dtype in INDICES and crd.dtype in INDICES \
        and all(a.flags.c_contiguous for a in (y, crd, vals, x))
