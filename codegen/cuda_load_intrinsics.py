"""The numba-cuda side of :mod:`codegen.cuda_loads` (imported only when the CUDA simulator is off).

Each load is a typing-time intrinsic: the element pointer numba-cuda would index, cast to
the global address space (and, for a vector, to a pointer to ``n`` elements), loaded with
the vector's alignment and marked ``!invariant.load`` so that NVVM emits the read-only
``ld.global.nc`` form. float16 vectors load as 32-bit words (``ld.global.nc.v4.u32`` for
eight values) and are split back into halves.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.cuda import cgutils
from numba.cuda.api_util import normalize_indices
from numba.cuda.core.errors import NumbaTypeError
from numba.cuda.extending import intrinsic

GLOBAL = 1  # NVVM's global address space


def _element_pointer(context, builder, array_type, index_type, array, index):
    index_type, index = normalize_indices(context, builder, index_type, index, array_type, array_type.dtype)
    struct = context.make_array(array_type)(context, builder, value=array)
    return cgutils.get_item_pointer(context, builder, array_type, struct, index, wraparound=False)


def _invariant_load(builder, pointer, align: int):
    value = builder.load(pointer, align=align)
    value.set_metadata("invariant.load", builder.module.add_metadata([]))
    return value


def _check_types(name: str, array, index, vector: bool):
    kinds = (types.Integer, types.Float) if vector else (types.Integer, types.Float, types.Boolean)
    if not isinstance(array, types.Array) or not isinstance(array.dtype, kinds):
        raise NumbaTypeError(f"{name} reads arrays of integers or floats{'' if vector else ' or booleans'}, "
                             f"got {array}")
    scalar = isinstance(index, types.Integer)
    if vector and (array.ndim != 1 or not scalar):
        raise NumbaTypeError(f"{name} reads 1-D arrays at an integer index, got {array}[{index}]")
    if not scalar and not (isinstance(index, types.UniTuple) and isinstance(index.dtype, types.Integer)
                           and index.count == array.ndim):
        raise NumbaTypeError(f"{name}: {index} does not index a {array.ndim}-D array")


@intrinsic
def _ldg(typingctx, array, index):
    _check_types("ldg", array, index, vector=False)

    def codegen(context, builder, sig, args):
        dtype = sig.args[0].dtype
        element = context.get_data_type(dtype)  # as stored: a boolean is a byte in memory
        pointer = _element_pointer(context, builder, sig.args[0], sig.args[1], *args)
        pointer = builder.addrspacecast(pointer, ir.PointerType(element, GLOBAL))
        value = _invariant_load(builder, pointer, context.get_abi_sizeof(element))
        return context.data_model_manager[dtype].from_data(builder, value)

    return array.dtype(array, index), codegen


def _item(builder, loaded, element, bits: int, k: int):
    """Element ``k`` of a loaded vector; narrow elements are cut out of their 32-bit word
    (a bitcast of the whole vector lets NVVM split the load into 64-bit halves)."""
    if bits >= 32:
        return builder.extract_element(loaded, ir.Constant(ir.IntType(32), k))
    per = 32 // bits
    word = builder.extract_element(loaded, ir.Constant(ir.IntType(32), k // per))
    word = builder.lshr(word, ir.Constant(ir.IntType(32), (k % per) * bits)) if k % per else word
    return builder.bitcast(builder.trunc(word, ir.IntType(bits)), element)


def _vector_intrinsic(name: str, n: int):
    @intrinsic
    def load(typingctx, array, index):
        _check_types(name, array, index, vector=True)
        nbytes = n * array.dtype.bitwidth // 8
        if nbytes not in (8, 16):
            raise NumbaTypeError(f"{name} of {array.dtype} moves {nbytes} bytes; vector loads move 8 or 16")

        def codegen(context, builder, sig, args):
            element = context.get_value_type(sig.args[0].dtype)
            pointer = _element_pointer(context, builder, sig.args[0], sig.args[1], *args)
            bits = sig.args[0].dtype.bitwidth
            lane, count = (ir.IntType(32), n * bits // 32) if bits < 32 else (element, n)  # halves as words
            vector = ir.VectorType(lane, count)
            pointer = builder.addrspacecast(pointer, ir.PointerType(element, GLOBAL))
            pointer = builder.bitcast(pointer, ir.PointerType(vector, GLOBAL))
            loaded = _invariant_load(builder, pointer, nbytes)
            items = [_item(builder, loaded, element, bits, k) for k in range(n)]
            return context.make_tuple(builder, sig.return_type, items)

        return types.UniTuple(array.dtype, n)(array, index), codegen

    return load


@intrinsic
def element_address(typingctx, array):
    """The address of ``array``'s data divided by its item size (an intp)."""
    if not isinstance(array, types.Array):
        raise NumbaTypeError(f"element_address takes an array, got {array}")

    def codegen(context, builder, sig, args):
        struct = context.make_array(sig.args[0])(context, builder, value=args[0])
        address = builder.ptrtoint(struct.data, context.get_value_type(types.intp))
        size = context.get_constant(types.intp, context.get_abi_sizeof(context.get_value_type(sig.args[0].dtype)))
        return builder.udiv(address, size)

    return types.intp(array), codegen


ldg = _ldg
ldg2, ldg4, ldg8 = (_vector_intrinsic(name, n) for name, n in (("ldg2", 2), ("ldg4", 4), ("ldg8", 8)))
