"""``import ustc`` makes idle OpenMP workers sleep (OMP_WAIT_POLICY=PASSIVE) unless the user chose."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("given,expected", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE"), ("passive", "passive")])
def test_wait_policy(given, expected):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if given is not None:
        env["OMP_WAIT_POLICY"] = given
    code = "import os, ustc; print(os.environ['OMP_WAIT_POLICY'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == expected


def test_set_before_numba_starts_its_threads():
    """The policy must be in the environment before the OpenMP runtime loads: ustc sets it
    before importing anything that could launch a parallel kernel."""
    code = ("import sys, ustc; import numba.np.ufunc.parallel as p;"
            "print(p._is_initialized)")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
