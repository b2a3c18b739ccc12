"""Shared by the subprocess case scripts (``matrix.py``, ``krylov_cases.py``, ``trisolve_cases.py``):
the case loop (one JSON record per line on stdout, a failure recorded rather than raised) and
the record of a kernel compiled to an sm_90 cubin."""

from __future__ import annotations

import json
import time
import traceback


def report(cases) -> int:
    """Run ``(name, run)`` pairs; ``run()`` returns a record dict (``"ok"`` and details)."""
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
