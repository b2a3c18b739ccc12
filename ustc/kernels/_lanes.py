"""Vectors of :data:`LANES` elements along a 1-D array, for hand-written kernels that work on several
rows at once (``kernels._diagonal_spmv``): a contiguous load and store, a load of every ``k``-th
element (a gather), a test that a run of integers all equal one value, and the lane-wise scale and
add of :class:`kernels._simd.Vec` values. The caller keeps every index it passes, and the
``LANES - 1`` elements after it (``k`` apart for :func:`load_every`), inside the array."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ._masked_spmv import lane_pointers, masked_gather
from ._simd import Vec, _pointer, _wide, fma, masked_ops, splat_ir  # noqa: F401 (fma re-exported)

LANES = 8


def _vector(context, dtype):
    return context.get_value_type(Vec(dtype, LANES))


load = masked_ops(LANES)[0]  # ``load(array, j)``: ``array[j : j + LANES]`` (kernels._simd)


@intrinsic
def store(typingctx, array, j, vec):
    """``array[j : j + LANES] = vec``."""

    def codegen(context, builder, sig, args):
        _wide(builder)
        pointer = _pointer(context, builder, sig.args[0], args[0], args[1])
        builder.store(args[2], builder.bitcast(pointer, args[2].type.as_pointer()), align=array.dtype.bitwidth // 8)
        return context.get_dummy_value()

    return types.none(array, j, vec), codegen


@intrinsic
def load_every(typingctx, array, j, k):
    """``array[j], array[j + k], ..., array[j + (LANES - 1) k]`` in one vector (a gather; L1 hits
    where ``LANES * k`` elements span a few lines)."""
    vec = Vec(array.dtype, LANES)

    def codegen(context, builder, sig, args):
        _wide(builder)
        i64 = ir.IntType(64)
        vty = _vector(context, array.dtype)
        step = builder.sext(args[2], i64) if args[2].type.width < 64 else args[2]
        index = builder.mul(splat_ir(builder, step, LANES), ir.Constant(ir.VectorType(i64, LANES), list(range(LANES))))
        pointers = lane_pointers(builder, _pointer(context, builder, sig.args[0], args[0], args[1]), index, vty.element)
        every = ir.Constant(ir.VectorType(ir.IntType(1), LANES), [1] * LANES)
        return masked_gather(builder, pointers, vty, every)

    if not isinstance(array.dtype, types.Float):
        return None
    return vec(array, j, k), codegen


@intrinsic
def all_equal(typingctx, array, j, value):
    """Whether ``array[j : j + LANES]`` (integers) all equal ``value``: one vector load and compare."""
    if not isinstance(array.dtype, types.Integer) or not isinstance(value, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        element = context.get_value_type(array.dtype)
        vty = ir.VectorType(element, LANES)
        pointer = _pointer(context, builder, sig.args[0], args[0], args[1])
        run = builder.load(builder.bitcast(pointer, vty.as_pointer()), align=array.dtype.bitwidth // 8)
        v = args[2]
        v = builder.trunc(v, element) if v.type.width > element.width else \
            builder.zext(v, element) if v.type.width < element.width else v
        same = builder.bitcast(builder.icmp_unsigned("==", run, splat_ir(builder, v, LANES)), ir.IntType(LANES))
        return builder.icmp_unsigned("==", same, ir.Constant(ir.IntType(LANES), (1 << LANES) - 1))

    return types.boolean(array, j, value), codegen


@intrinsic
def zeros(typingctx, like):
    """A vector of :data:`LANES` zeros of ``like``'s dtype (``like`` an array)."""
    vec = Vec(like.dtype, LANES)

    def codegen(context, builder, sig, args):
        return ir.Constant(context.get_value_type(vec), None)

    return vec(like), codegen


@intrinsic
def scale_add(typingctx, v, alpha, w):
    """``alpha * v + w`` lane by lane (``alpha`` a scalar of ``v``'s dtype; rounded twice)."""

    def codegen(context, builder, sig, args):
        _wide(builder)
        return builder.fadd(builder.fmul(args[0], splat_ir(builder, args[1], LANES)), args[2])

    return v(v, alpha, w), codegen
