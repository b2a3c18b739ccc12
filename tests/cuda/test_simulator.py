"""Every kernel of the CUDA correctness matrix runs in Numba's CUDA simulator and matches NumPy.

One subprocess (``NUMBA_ENABLE_CUDASIM=1`` replaces ``numba.cuda`` at import) runs the
whole matrix in ``matrix.py``: SpMV in every format family, SpMM, SDDMM, sparse + sparse
and sparse * sparse in mixed formats, sparse * dense, sums over each axis, MTTKRP on CSF,
with the warp-per-row schedule forced on some and chosen by row statistics on others.
"""

from __future__ import annotations

from _spawn import failures, run_matrix


def test_correctness_matrix_in_the_simulator(tmp_path):
    records = run_matrix("sim", tmp_path, simulator=True)
    assert len(records) >= 35
    assert not [r for r in records if not r["ok"]], failures(records)
    by_case = {r["case"]: r for r in records}
    # the schedules the matrix means to exercise were the ones that ran
    assert "warp_per_row(width=4)" in by_case["spmv_csr_warp4"]["schedules"][0]
    assert "warp_per_row(width=8)" in by_case["spmv_csr"]["schedules"][0]  # chosen: mean row length 4.2
    assert "atomic" in by_case["spmv_csc_atomic"]["schedules"][0]
    assert "atomic" in by_case["sum_all_csr"]["schedules"][0]
    assert by_case["add_csr_dcsr"]["schedules"][0].startswith("serial")
    # merge path: forced, and chosen for a level whose longest row is over 32x the mean
    assert by_case["spmv_csr_merge_path"]["schedules"][0].startswith("merge_path")
    assert "skewed" in by_case["spmv_very_skewed_auto_merge"]["schedules"][0]
    # block tiles: the rows of a BSR block, the columns of the dense SpMM operand
    assert "block_tile(width=4, loop=v_i_mod3)" in by_case["spmv_bsr32_tile_auto"]["schedules"][0]
    assert "block_tile(width=4, loop=k)" in by_case["spmm_csr"]["schedules"][0]
    assert "block_tile(width=32, loop=k)" in by_case["spmm_csc_tile_atomic"]["schedules"][0]
