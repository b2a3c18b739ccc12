"""Run ``matrix.py MODE`` (or another case script) in a fresh process and parse its JSON lines.

The process shares the test session's kernel cache (``USTC_CACHE_DIR`` and ``NUMBA_CACHE_DIR``
as the tests see them): the CPU kernels it needs (format conversions, the library's own)
are compiled once for the whole suite instead of once in every script run; the CUDA
kernels under test are run, modelled or compiled to PTX afresh in each process whatever
the cache holds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

MATRIX = Path(__file__).with_name("matrix.py")


def run_matrix(mode: str, workdir, simulator: bool, timeout: int = 600, script: Path = MATRIX) -> list[dict]:
    """``script mode`` run in ``workdir`` with the session's kernel cache (see the module docstring)."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    if simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    done = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=workdir)
    assert done.returncode == 0, done.stderr[-4000:]
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert records, f"no results from {script.name} {mode}:\n{done.stderr[-4000:]}"
    return records


def failures(records: list[dict]) -> str:
    bad = [r for r in records if not r["ok"]]
    return "\n\n".join(f"{r['case']}: {r.get('error', '')}\n{r.get('trace', '')}{r.get('got', '')}" for r in bad)


def assert_cubins(kernels: list[dict]) -> None:
    """Every kernel record (``_cases.kernel_record``) linked to a cubin within the register file, unspilled."""
    assert all(k["cubin_bytes"] > 0 and 0 < k["registers"] <= 255 for k in kernels)
    assert all(k["spill_stores"] == 0 and k["spill_loads"] == 0 for k in kernels), "register spills"


def no_gpu_reason() -> str | None:
    """Why real-GPU tests must skip here (None: an NVIDIA GPU and its driver are present)."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        return "the CUDA simulator is on"
    try:
        from numba import cuda

        return None if cuda.is_available() else "no CUDA GPU"
    except Exception as exc:  # noqa: BLE001 - any failure to find a driver means no GPU
        return f"numba.cuda unavailable: {exc}"


def gpu_only():
    """The skip mark of real-GPU tests (reason: :func:`no_gpu_reason`)."""
    import pytest

    reason = no_gpu_reason()
    return pytest.mark.skipif(reason is not None, reason=f"needs an NVIDIA GPU ({reason})")
