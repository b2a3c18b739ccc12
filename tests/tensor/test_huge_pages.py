"""ustc.kernels._alloc: large fresh buffers advised for transparent huge pages, from Python and kernels."""

from __future__ import annotations

import os

import numba
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ustc.kernels._alloc import HUGE_FROM, HUGE_PAGE, LINUX, advise, advised_range, empty

THP = os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled")
DTYPES = (np.bool_, np.int8, np.int32, np.int64, np.float32, np.float64, np.complex128)
# above glibc's largest mmap threshold (32 MiB): the buffer is a mapping of its own
MAPPED = 48 << 20


@numba.njit
def _kernel_buffers(n):
    """Kernel allocations of ``n`` float64 / int32 through the allocator, each filled."""
    a, b = empty(n, np.float64), empty(n, np.dtype(np.int32))
    for i in range(n):
        a[i], b[i] = i, -i
    return a, b


@numba.njit
def _kernel_plain(n):
    a = np.empty(n, np.float64)
    a[:] = 1.0
    return a


@given(address=st.integers(0, 1 << 47), nbytes=st.integers(0, 64 << 20))
@settings(max_examples=200, deadline=None)
def test_advised_range_is_whole_pages_inside_the_buffer(address, nbytes):
    start, length = advised_range(address, nbytes)
    assert length >= 0 and length % HUGE_PAGE == 0
    if length:
        assert nbytes >= HUGE_FROM and start % HUGE_PAGE == 0
        assert address <= start and start + length <= address + nbytes
        assert start - address < HUGE_PAGE and address + nbytes - (start + length) < HUGE_PAGE
    if nbytes < HUGE_FROM:
        assert length == 0


@pytest.mark.parametrize("n", [0, 1, 1000, HUGE_FROM // 8 + 3])
@pytest.mark.parametrize("dtype", DTYPES)
def test_python_empty_is_an_ordinary_array(n, dtype):
    a = empty(n, dtype)
    assert type(a) is np.ndarray and a.dtype == np.dtype(dtype) and a.shape == (n,)
    assert a.flags.c_contiguous and a.flags.writeable and a.flags.owndata
    a[:] = np.arange(n) % 2
    assert np.array_equal(a, (np.arange(n) % 2).astype(dtype))


@pytest.mark.parametrize("n", [0, 1, 1000, (HUGE_FROM + HUGE_PAGE) // 8 + 5])
def test_kernel_empty_is_an_ordinary_array(n):
    a, b = _kernel_buffers(n)
    for x, dtype in ((a, np.float64), (b, np.int32)):
        assert type(x) is np.ndarray and x.dtype == dtype and x.shape == (n,)
        assert x.flags.c_contiguous and x.flags.writeable
    assert np.array_equal(a, np.arange(n, dtype=np.float64)) and np.array_equal(b, -np.arange(n, dtype=np.int32))
    b[:] = 7  # writable from Python too
    assert (b == 7).all()


def test_advise_never_changes_an_array():
    x = np.arange(HUGE_FROM // 4, dtype=np.int64)
    before = x.copy()
    advise(x)
    advise(x[::3])            # not contiguous: ignored
    advise(x[1:])             # unaligned start
    advise(np.empty(0))
    assert np.array_equal(x, before) and x.flags.writeable


def _vm_flags(address: int) -> list[str]:
    """The VmFlags of the mapping holding ``address`` (from /proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(v, 16) for v in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not (LINUX and THP), reason="transparent huge pages are Linux's, compiled in")
def test_large_kernel_buffers_are_advised():
    a, _ = _kernel_buffers(MAPPED // 8)
    start, length = advised_range(a.ctypes.data, a.nbytes)
    assert length and "hg" in _vm_flags(start) and "hg" in _vm_flags(start + length - 1)
    plain = _kernel_plain(MAPPED // 8)   # the control: Numba's own allocation is not advised
    start, _ = advised_range(plain.ctypes.data, plain.nbytes)
    assert "hg" not in _vm_flags(start)
    host = empty(MAPPED // 8, np.float64)
    start, length = advised_range(host.ctypes.data, host.nbytes)
    assert "hg" in _vm_flags(start)
