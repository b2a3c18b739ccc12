"""A software prefetch for hand-written Numba kernels: ``prefetch(a, i)`` asks the CPU to bring the
cache line of ``a[i]`` in (LLVM's ``llvm.prefetch``: a read, kept in all cache levels). A hint, not
a load: it never faults and changes no value; callers still pass only indices inside ``a``."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def prefetch(typingctx, array, index):
    """``prefetch(array, index)``: the line holding ``array[index]`` (a C-contiguous or strided
    array, an integer index) is fetched ahead of its use."""
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
        # read (0), keep in every level (3), data cache (1)
        builder.call(fn, [builder.bitcast(ptr, byte), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen
