"""Large fresh buffers backed by transparent huge pages: ``empty(n, dtype)`` and ``advise(array)``,
callable from Python and from Numba kernels alike.

Linux with transparent huge pages in ``madvise`` mode gives an anonymous mapping 2 MiB pages
only where it was advised (``madvise(MADV_HUGEPAGE)``); elsewhere a fresh buffer is faulted in
4 KiB at a time. NumPy advises its own allocations of 4 MiB and more, Numba's runtime
(``np.empty`` inside a kernel) does not, and glibc maps an allocation above its mmap threshold
(32 MiB at most) afresh at every call. Measured on the 2-core project machine: allocating 188 MB
inside a kernel and writing it once took 112 ms, 47 ms advised (as with a NumPy allocation).

``advise`` is a hint: it never changes a value, a size or an address, ignores failure (huge
pages off, an old kernel) and does nothing off Linux or under :data:`HUGE_FROM` bytes. Only the
whole 2 MiB pages inside the buffer are advised, so neighbouring allocations are untouched.
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload

# Buffers from this size on are advised (NumPy's own threshold)
HUGE_FROM = 4 << 20
HUGE_PAGE = 2 << 20
MADV_HUGEPAGE = 14  # Linux's value (asm-generic/mman-common.h)
LINUX = sys.platform.startswith("linux")


def _libc_madvise():
    """libc's ``madvise`` through ctypes, or None where there is none (not Linux, no libc)."""
    if not LINUX:
        return None
    try:
        fn = ctypes.CDLL(None).madvise  # the process's own symbols (libc among them): no ldconfig run
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    return fn


_MADVISE = _libc_madvise()


def advised_range(address: int, nbytes: int) -> tuple[int, int]:
    """``(start, length)`` of the whole huge pages inside ``[address, address + nbytes)``; length 0
    under :data:`HUGE_FROM` bytes or where no whole page fits."""
    if nbytes < HUGE_FROM:
        return address, 0
    start = (address + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1)
    end = (address + nbytes) & ~(HUGE_PAGE - 1)
    return start, max(end - start, 0)


def advise(array: np.ndarray) -> None:
    """Ask the kernel to back ``array``'s buffer with huge pages when it faults it in (a hint:
    no-op under :data:`HUGE_FROM` bytes, off Linux, or where ``madvise`` fails)."""
    if _MADVISE is None or not array.flags.c_contiguous:
        return
    start, length = advised_range(array.ctypes.data, array.nbytes)
    if length:
        _MADVISE(start, length, MADV_HUGEPAGE)


def empty(n: int, dtype) -> np.ndarray:
    """``np.empty(n, dtype)``, advised for huge pages (:func:`advise`): an ordinary, writable,
    1-D C-contiguous NumPy array whose contents are undefined."""
    out = np.empty(n, dtype)
    advise(out)
    return out


@intrinsic
def _madvise_hugepage(typingctx, start, length):
    """``madvise(start, length, MADV_HUGEPAGE)`` from a kernel (both integers); its result ignored.
    Off Linux nothing is emitted."""
    if not isinstance(start, types.Integer) or not isinstance(length, types.Integer):
        return None
    sig = types.void(start, length)

    def codegen(context, builder, signature, args):
        if LINUX:
            i64, i32, byte = ir.IntType(64), ir.IntType(32), ir.IntType(8).as_pointer()
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, [byte, i64, i32]), "madvise")
            start, length = (context.cast(builder, v, t, types.uint64) for v, t in zip(args, signature.args))
            builder.call(fn, [builder.inttoptr(start, byte), length, ir.Constant(i32, MADV_HUGEPAGE)])
        return context.get_dummy_value()

    return sig, codegen


@overload(advise)
def _advise_kernel(array):
    if not isinstance(array, types.Array) or array.layout != "C":
        return None

    def impl(array):
        nbytes = np.uint64(array.size * array.itemsize)
        if nbytes >= np.uint64(HUGE_FROM):
            page, address = np.uint64(HUGE_PAGE), np.uint64(array.ctypes.data)
            start = (address + page - np.uint64(1)) // page * page
            end = (address + nbytes) // page * page
            if end > start:
                _madvise_hugepage(start, end - start)

    return impl


@overload(empty)
def _empty_kernel(n, dtype):
    def impl(n, dtype):
        out = np.empty(n, dtype)
        advise(out)
        return out

    return impl
