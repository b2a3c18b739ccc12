"""Shared by the subprocess case scripts (``matrix.py``, ``krylov_cases.py``, ``trisolve_cases.py``):
the case loop (one JSON record per line on stdout, a failure recorded rather than raised) and
the record of a kernel compiled to an sm_90 cubin."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback

import numpy as np


ALLOCATE = np.empty     # a block's shared array (a test slows it down to widen the old race)


def lock_simulator_shared_arrays() -> None:
    """Make the CUDA simulator's ``cuda.shared.array`` atomic across a block's threads.

    numba-cuda's simulator (0.30) looks the block's array up by call site and creates it
    when missing, unlocked: a thread switch between the lookup and the store hands two
    threads of one block different arrays, and a block fold then drops shares (seen once
    in CI as a wrong ``dot``). A real GPU has one array per block; so does this, locked.
    """
    from numba.core import types
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support

    shared = kernelapi.FakeCUDAShared
    if getattr(shared, "_ustc_locked", False):
        return
    lock, dynamic = threading.Lock(), shared.array

    def array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None:      # dynamic shared memory / the simulator's error
            return dynamic(self, shape, dtype, alignment)
        frame = sys._getframe(1)
        site = (frame.f_code.co_filename, frame.f_lineno)     # the simulator's key: the calling line
        with lock:
            found = self._allocations.get(site)
            if found is None:
                dtype = numpy_support.as_dtype(dtype) if isinstance(dtype, types.Type) else np.dtype(dtype)
                found = self._allocations[site] = ALLOCATE(shape, dtype)
        return found

    shared.array, shared._ustc_locked = array, True


def report(cases) -> int:
    """Run ``(name, run)`` pairs; ``run()`` returns a record dict (``"ok"`` and details)."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        lock_simulator_shared_arrays()
    for name, run in cases:
        t0 = time.perf_counter()
        try:
            record = run()
        except Exception as exc:  # noqa: BLE001 - reported per case
            record = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-3000:]}
        record.update(case=name, seconds=round(time.perf_counter() - t0, 3))
        print(json.dumps(record), flush=True)
    return 0


def kernel_record(k) -> dict:
    """What the tests check of one compiled kernel (``ustc.ops.cuda_ptx`` result)."""
    return {"name": k.name, "registers": k.registers, "spill_stores": k.spill_stores,
            "spill_loads": k.spill_loads, "cubin_bytes": k.cubin_bytes, "sm": "sm_90"}


def ptx_records(kernels) -> list[dict]:
    """One case record per compiled kernel."""
    return [{"case": f"ptx_{k.name}({k.signature})", "ok": k.cubin_bytes > 0, "kernel": kernel_record(k)}
            for k in kernels]
