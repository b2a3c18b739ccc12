"""The mpi4py transport under ``mpiexec -n 2``: the block code's SpMV and CG / BiCGSTAB / GMRES
(Jacobi too, uneven and empty blocks, several block formats, interleaved user labels)
reproduce single-process ustc;
skipped when mpi4py or mpiexec is missing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("mpi4py")


def _mpiexec():
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else shutil.which("mpiexec")


@pytest.mark.skipif(_mpiexec() is None, reason="needs mpiexec (pip install mpich)")
def test_mpi_transport_two_ranks(tmp_path):
    script = os.path.join(os.path.dirname(__file__), "mpi_spmd_script.py")
    out = tmp_path / "out.json"
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([_mpiexec(), "-n", "2", sys.executable, script, str(out)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["size"] == 2 and len(result["cases"]) == 5
    for case in result["cases"]:
        assert case["spmv_error"] < 1e-12, case
        assert case["converged"] and case["iterations"] == case["single_iterations"], case
        assert case["x_rel"] < 1e-10, case
    assert result["cases"][0]["halo"] > 0 and result["cases"][0]["messages"] > 0


def test_missing_mpi_names_the_extra(monkeypatch):
    import ustc
    from ustc.distributed import comm

    monkeypatch.setitem(sys.modules, "mpi4py", None)
    with pytest.raises(ustc.MissingDependencyError, match="mpi"):
        comm.mpi()
