"""The test-defined level type ``ell(K)`` runs SpMV, A + B and a conversion in the CUDA simulator,
and its kernels link to sm_90 cubins (``ell_cases.py``, a process of its own per mode)."""

from __future__ import annotations

from pathlib import Path

from _spawn import assert_cubins, failures, run_matrix

CASES = Path(__file__).with_name("ell_cases.py")


def test_ell_kernels_in_the_simulator(tmp_path):
    records = run_matrix("sim", tmp_path, simulator=True, script=CASES)
    assert {r["case"] for r in records} == {"spmv_ell", "add_ell_ell_to_csr", "add_ell_csr_to_coo",
                                            "convert_csr_to_ell"}
    assert all(r["ok"] for r in records), failures(records)


def test_ell_kernels_link_to_cubins(tmp_path):
    records = run_matrix("ptx", tmp_path, simulator=False, script=CASES)
    assert all(r["ok"] for r in records), failures(records)
    assert_cubins([k for r in records for k in r["kernels"]])
