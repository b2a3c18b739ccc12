"""Every kernel of the CUDA correctness matrix compiles to PTX for sm_90 (NVVM) and links
to a cubin (nvJitLink) — no GPU and no CUDA driver needed, only the ``cuda`` extra's wheels.

Runs ``matrix.py ptx`` in one subprocess without the simulator (which has no
``compile_ptx``). A missing NVVM/nvJitLink wheel fails here, as the issue asks; the
test skips only when ``numba-cuda`` itself is absent.
"""

from __future__ import annotations

import pytest

from _spawn import assert_cubins, failures, run_matrix

pytest.importorskip("numba.cuda")


def test_correctness_matrix_compiles_to_cubins(tmp_path):
    records = run_matrix("ptx", tmp_path, simulator=False)
    assert len(records) >= 35
    assert not [r for r in records if not r["ok"]], failures(records)
    kernels = [k for r in records for k in r["kernels"]]
    assert_cubins(kernels)
