"""The loop shared by the subprocess case scripts (``krylov_cases.py``, ``trisolve_cases.py``):
run every case, one JSON record per line on stdout, a failure recorded rather than raised."""

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
