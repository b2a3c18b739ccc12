"""Load intrinsics for generated CUDA kernels: read-only (``ld.global.nc``) and vector loads.

numba-cuda reads an array element with a plain ``ld.global`` of the element's width.
These device functions give a kernel what nvcc emits for ``const __restrict__`` data:

* ``ldg(a, i)``: ``a[i]`` through the read-only (non-coherent) data path,
  ``ld.global.nc``. Only for arrays no thread writes while the kernel runs.
* ``ldg2(a, i)``, ``ldg4(a, i)``, ``ldg8(a, i)``: the tuple ``a[i], .., a[i + n - 1]`` of a
  1-D array in one read-only vector load of ``n * itemsize`` bytes, which must be 8 or 16
  (``ld.global.nc.v2`` / ``.v4``; eight float16 values travel as four 32-bit words).
  The caller guarantees the address of ``a[i]`` aligned to ``n * itemsize`` bytes and
  ``i + n <= len(a)``: a vector load never reads past the end.
* ``element_address(a)``: the address of ``a[0]`` in elements (bytes // itemsize), from
  which a kernel finds the first index a vector load may start at
  (``(-element_address(a)) % n``) however the buffer was allocated or sliced.

Each is an ordinary Python function too, so the same generated source runs in Numba's
CUDA simulator (which checks the contract above and raises where it is broken) and in
the lock-step warp model (``lanes``: the model's bounds-checked memory, refusing a
read-only load of an array the kernel writes and a misaligned or overlong vector).
On the GPU they are ``numba.cuda`` intrinsics: LLVM loads in the global address space
marked ``!invariant.load``, which NVVM turns into ``ld.global.nc[.v2|.v4]``.
"""

from __future__ import annotations

import numpy as np
from numba import config

from ustc.errors import KernelError

from .cuda_schedule import vector_size  # noqa: F401  (re-exported: the loads' sizes)
from .warp_lanes import ModelError, lanes_of

#: the vector loads: name -> elements a load
VECTOR = {"ldg2": 2, "ldg4": 4, "ldg8": 8}
#: bytes a vector load may move (64- and 128-bit loads)
VECTOR_BYTES = (8, 16)
NAMES = ("ldg", *VECTOR, "element_address")


def aligned(array, n: int) -> bool:
    """Whether the data of ``array`` (NumPy, CuPy, a Numba device array, anything with the
    array interfaces) starts at a multiple of ``n`` of its elements, as ``ldg<n>`` needs."""
    address = _address(array)
    return address is not None and address % (n * np.dtype(array.dtype).itemsize) == 0


def _address(array):
    array = getattr(array, "_ary", array)  # the simulator's device arrays wrap a NumPy array
    for attr in ("__cuda_array_interface__", "__array_interface__"):
        face = getattr(array, attr, None)
        if face is not None:
            return int(face["data"][0])
    return None


# -- plain Python: the simulator --------------------------------------------------------------

def _check(name: str, array, i, n: int) -> int:
    i = int(i)
    size = len(array)
    if (_simulated_address(array) + i) % n or i < 0 or i + n > size:
        raise KernelError(f"{name}({i}) on an array of {size} elements: a vector load of {n} needs "
                          f"an element aligned to {n} elements and {n} elements left")
    return i


def _simulated_address(array) -> int:
    return _address(array) // np.dtype(array.dtype).itemsize


def _simulated_ldg(array, i):
    return array[i]


def _simulated_vector(name: str, n: int):
    def load(array, i):
        i = _check(name, array, i, n)
        return tuple(array[i + k] for k in range(n))

    load.__name__ = name
    return load


# -- the warp model ---------------------------------------------------------------------------

def _read_only(name: str, memory) -> None:
    if memory.records is not None:  # the model tracks the arrays the kernel writes
        raise ModelError(f"{name}({memory.name}, ...): the kernel writes {memory.name}, so the read-only "
                         f"path may return stale data")


def _model_ldg(mask, memory, i):
    _read_only("ldg", memory)
    return memory.load(i if isinstance(i, tuple) else (i,), mask)


def _model_vector(name: str, n: int):
    def lanes(mask, memory, i):
        _read_only(name, memory)
        start = lanes_of(i, mask.shape[0]).astype(np.int64)
        base = _simulated_address(memory.array)
        bad = mask & (((base + start) % n != 0) | (start + n > memory.array.shape[0]))
        if bad.any():
            t = int(np.nonzero(bad)[0][0])
            raise ModelError(f"{name}({memory.name}, {int(start[t])}) in thread {t}: a vector load of {n} needs "
                             f"an element aligned to {n} elements with {n} elements left "
                             f"(the array has {memory.array.shape[0]})")
        return tuple(memory.load((start + k,), mask) for k in range(n))

    return lanes


def _model_address(mask, memory):
    return _simulated_address(memory.array)


if config.ENABLE_CUDASIM:  # pragma: no cover - exercised in the simulator's subprocesses
    ldg, element_address = _simulated_ldg, _simulated_address
    ldg2, ldg4, ldg8 = (_simulated_vector(name, n) for name, n in VECTOR.items())
else:
    from .cuda_load_intrinsics import element_address, ldg, ldg2, ldg4, ldg8  # noqa: F401

ldg.lanes = _model_ldg
element_address.lanes = _model_address
for _name, _n in VECTOR.items():
    globals()[_name].lanes = _model_vector(_name, _n)
