"""Explicit SIMD vectors for hand-written Numba kernels: a vector type and its intrinsics.

Numba leaves vectorisation to LLVM, which vectorises innermost loops only. A kernel that should keep a
tile of its output in registers across a loop (``kernels._linear_nm``'s n:m SpMM: a tile of a row of
``Y`` summed over a row's slots, one vector load of ``B`` per vector FMA) cannot be written that way:
LLVM vectorised the slot loop with gathers instead, or left the tile as scalars. Here a :class:`Vec`
is an LLVM ``<lanes x dtype>`` value, so such a tile lives in SSA values (registers) and each
operation is one instruction.

Every function using these asks for 512-bit registers (``"prefer-vector-width"="512"``,
``"min-legal-vector-width"="512"``): on AVX-512 CPUs whose LLVM tuning prefers 256 bits (Intel's
server cores) a 16-lane float32 vector would otherwise be split in two. Where the CPU has no AVX-512,
LLVM splits the vectors into what it has; the results are the same.
"""

from __future__ import annotations

import functools

import numpy as np
import llvmlite.binding as llvm
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.datamodel import models, register_default
from numba.extending import intrinsic

ALIGN = 64  # bytes: a 512-bit load that crosses a cache line costs two (2x the n:m SpMM's time when B is not aligned)
WIDE = ('"prefer-vector-width"="512"', '"min-legal-vector-width"="512"')
# Masked expand-loads are one instruction with AVX-512 and a scalar sequence without: the mask kernels
# (kernels._linear_csr_bitmap) are chosen only where the host has it.
HAS_AVX512 = bool(llvm.get_host_cpu_features().get("avx512f", False))


class Vec(types.Type):
    """``lanes`` values of ``dtype`` (a Numba float type) in one LLVM vector."""

    def __init__(self, dtype, lanes: int):
        self.dtype, self.lanes = dtype, lanes
        super().__init__(name=f"Vec({dtype} x {lanes})")


@register_default(Vec)
class _VecModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, ir.VectorType(dmm.lookup(fe_type.dtype).get_value_type(), fe_type.lanes))


def _wide(builder) -> None:
    for attribute in WIDE:  # string attributes: llvmlite's AttributeSet.add accepts only its known names
        set.add(builder.function.attributes, attribute)


def _pointer(context, builder, array_type, array, *indices):
    """Pointer to ``array[indices]`` (no wraparound: callers pass in-range unsigned indices)."""
    a = context.make_array(array_type)(context, builder, array)
    return cgutils.get_item_pointer2(context, builder, a.data, cgutils.unpack_tuple(builder, a.shape),
                                     cgutils.unpack_tuple(builder, a.strides), array_type.layout, list(indices),
                                     wraparound=False)


def _load(builder, pointer, vty, dtype):
    """The vector ``vty`` stored from ``pointer`` on, aligned as its elements (``dtype``)."""
    return builder.load(builder.bitcast(pointer, vty.as_pointer()), align=dtype.bitwidth // 8)


def splat_ir(builder, value, lanes: int):
    """``value`` in every one of ``lanes`` lanes (LLVM IR)."""
    v = builder.insert_element(ir.Constant(ir.VectorType(value.type, lanes), ir.Undefined), value,
                               ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))


def call_llvm(builder, name: str, ret, args):
    """A call of the LLVM intrinsic ``name`` returning ``ret`` (declared on first use)."""
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ret, [a.type for a in args]), name)
    return builder.call(fn, args)


def _suffix(vty) -> str:
    """LLVM's overload suffix of a float vector type: ``v16f32`` for ``<16 x float>``."""
    return f"v{vty.count}f{vty.element.intrinsic_name[1:]}"


@functools.lru_cache(maxsize=None)
def lanes_ops(lanes: int) -> tuple:
    """``(load, splat)`` for vectors of ``lanes``: ``load(a, i, j)`` is ``a[i, j : j + lanes]`` of a 2-D
    C-contiguous array (the caller keeps ``j + lanes`` within the row), ``splat(x)`` is ``x`` in every lane."""

    @intrinsic
    def load(typingctx, array, i, j):
        vec = Vec(array.dtype, lanes)

        def codegen(context, builder, sig, args):
            _wide(builder)
            pointer = _pointer(context, builder, sig.args[0], args[0], args[1], args[2])
            return _load(builder, pointer, context.get_value_type(vec), array.dtype)

        return vec(array, i, j), codegen

    @intrinsic
    def splat(typingctx, x):
        vec = Vec(x, lanes)

        def codegen(context, builder, sig, args):
            _wide(builder)
            return splat_ir(builder, args[0], lanes)

        return vec(x), codegen

    return load, splat


@intrinsic
def store(typingctx, array, i, j, vec):
    """``array[i, j : j + lanes] = vec`` (as ``load``)."""

    def codegen(context, builder, sig, args):
        _wide(builder)
        pointer = _pointer(context, builder, sig.args[0], args[0], args[1], args[2])
        builder.store(args[3], builder.bitcast(pointer, args[3].type.as_pointer()), align=array.dtype.bitwidth // 8)
        return context.get_dummy_value()

    return types.none(array, i, j, vec), codegen


@intrinsic
def fma(typingctx, a, b, c):
    """``a * b + c`` lane by lane, one rounding (``llvm.fma``)."""

    def codegen(context, builder, sig, args):
        _wide(builder)
        vty = args[0].type
        return call_llvm(builder, f"llvm.fma.{_suffix(vty)}", vty, list(args))

    return c(a, b, c), codegen


@intrinsic
def add(typingctx, a, b):
    """``a + b`` lane by lane."""

    def codegen(context, builder, sig, args):
        _wide(builder)
        return builder.fadd(args[0], args[1])

    return a(a, b), codegen


def aligned_empty(shape, dtype, align: int = ALIGN) -> np.ndarray:
    """An uninitialised C-contiguous array whose first element sits at a multiple of ``align`` bytes."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    raw = np.empty(count * dtype.itemsize + align, dtype=np.uint8)
    start = -raw.ctypes.data % align
    return raw[start:start + count * dtype.itemsize].view(dtype).reshape(shape)


def is_aligned(array: np.ndarray, align: int = ALIGN) -> bool:
    """Whether ``array``'s first element sits at a multiple of ``align`` bytes."""
    return array.ctypes.data % align == 0


@functools.lru_cache(maxsize=None)
def masked_ops(lanes: int) -> tuple:
    """``(load1, expand, total)`` for vectors of ``lanes``: ``load1(a, j)`` is ``a[j : j + lanes]`` of a 1-D
    C-contiguous array; ``expand(a, p, mask)`` puts ``a[p], a[p + 1], ...`` into the lanes whose bit is set
    in the ``lanes``-bit unsigned ``mask`` (zeros elsewhere), reading exactly ``popcount(mask)`` elements
    (AVX-512 ``vexpandps``); ``total(v)`` is the sum of the lanes (any order)."""
    mask_type = {8: types.uint8, 16: types.uint16}[lanes]

    @intrinsic
    def load1(typingctx, array, j):
        vec = Vec(array.dtype, lanes)

        def codegen(context, builder, sig, args):
            _wide(builder)
            pointer = _pointer(context, builder, sig.args[0], args[0], args[1])
            return _load(builder, pointer, context.get_value_type(vec), array.dtype)

        return vec(array, j), codegen

    @intrinsic
    def expand(typingctx, array, p, mask):
        vec = Vec(array.dtype, lanes)

        def codegen(context, builder, sig, args):
            _wide(builder)
            pointer = _pointer(context, builder, sig.args[0], args[0], args[1])
            vty = context.get_value_type(vec)
            bits = builder.bitcast(builder.trunc(args[2], ir.IntType(lanes)), ir.VectorType(ir.IntType(1), lanes))
            return call_llvm(builder, f"llvm.masked.expandload.{_suffix(vty)}", vty,
                             [pointer, bits, ir.Constant(vty, None)])

        return vec(array, p, mask_type), codegen

    @intrinsic
    def total(typingctx, v):
        def codegen(context, builder, sig, args):
            _wide(builder)
            vty = args[0].type
            return call_llvm(builder, f"llvm.vector.reduce.fadd.{_suffix(vty)}", vty.element,
                             [ir.Constant(vty.element, 0.0), args[0]])

        return v.dtype(v), codegen

    return load1, expand, total


@intrinsic
def popcount(typingctx, mask):
    """The number of set bits of an unsigned integer, as a ``uintp`` (``llvm.ctpop``)."""

    def codegen(context, builder, sig, args):
        ity = args[0].type
        count = call_llvm(builder, f"llvm.ctpop.i{ity.width}", ity, list(args))
        return builder.zext(count, ir.IntType(64)) if ity.width < 64 else count

    return types.uintp(mask), codegen


@intrinsic
def fetch_add(typingctx, array, index, value):
    """``array[index] += value`` as one atomic step, returning the element's value before it (LLVM
    ``atomicrmw add``, monotonic): threads taking tasks from a shared counter each get a distinct one.
    ``array`` holds integers; the caller keeps ``index`` inside it."""
    if not isinstance(array, types.Array) or not isinstance(array.dtype, types.Integer) \
            or not isinstance(value, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        pointer = _pointer(context, builder, sig.args[0], args[0], args[1])
        step = context.cast(builder, args[2], sig.args[2], sig.args[0].dtype)
        return builder.atomic_rmw("add", pointer, step, "monotonic")

    return array.dtype(array, index, value), codegen
