"""benchmarks/bench_gpu.py without a GPU: it skips cleanly (exit 0, nothing written), and its
verdicts on issue 19's targets read the right rows (synthetic times)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import bench_gpu  # noqa: E402


def test_skips_cleanly_without_a_device(monkeypatch, capsys):
    monkeypatch.setattr(bench_gpu, "device_or_reason", lambda: (None, "no CUDA device"))
    written = []
    monkeypatch.setattr(bench_gpu, "write_section", lambda *a: written.append(a))
    assert bench_gpu.main(["--write"]) == 0
    assert "bench_gpu: skipped: no CUDA device" in capsys.readouterr().out and not written


def _times(scale: float) -> dict:
    """Every row the verdicts read, each ustc row just inside its target at ``scale`` 1 (a hair
    faster than the ratio asks; 50 / 30 / 15 µs against 55 / 38 / 19) and ``scale`` times slower."""
    edge = 1.0001
    ms = {"ustc CSR": 0.050 * scale, "CuPy CSR (cuSPARSE)": 0.050 * edge, "ustc DIAI": 0.030 * scale,
          "ustc DIAI (f32)": 0.015 * scale, "dense f16: ustc GEMV": scale, "dense f16: cuBLAS GEMV": 0.9 * edge}
    for z, need in ((50, 1.35), (70, 2.2), (90, 4.8)):
        ms[f"f16 {z}% zeros: ustc best delta"] = scale
        ms[f"f16 {z}% zeros: cuBLAS GEMV"] = need * edge
        ms[f"f16 {z}% zeros: cuSPARSE CSR (f32)"] = 2.6 * edge
    for z, need in ((50, 1.3), (80, 1.8)):
        ms[f"SpMM batch 16, f16 {z}% zeros: ustc CSR"] = scale
        ms[f"SpMM batch 16, f16 {z}% zeros: cuBLAS GEMM"] = need * edge
    for b in (1, 16):
        ms[f"2:4 f16 batch {b}: ustc"], ms[f"2:4 f16 batch {b}: cuBLAS"] = scale, 1.5 * edge
    return ms


@pytest.mark.parametrize("scale, verdict", [(1.0, "PASS"), (2.0, "FAIL")])
def test_every_target_gets_a_verdict(scale, verdict):
    lines = bench_gpu.verdicts(_times(scale))
    rows = lines[2:]
    assert len(rows) == 4 + 6 + 2 + 2 + 1
    assert all(line.endswith(f"| {verdict} |") for line in rows), lines
    assert any("stencil SpMV, CSR f64 <= 55 µs | 50.0 µs" in line for line in rows) == (scale == 1.0)


def test_ratios_and_limits_are_judged_at_their_thresholds():
    ms = _times(1.0)
    ms["f16 90% zeros: ustc best delta"] = 4.8 / 4.7        # 4.7x cuBLAS: under the 4.8x target, 2.55x cuSPARSE
    ms["ustc DIAI (f32)"] = 0.0195                             # 19.5 µs: over 19
    by = {line.split(" | ")[0][2:]: line for line in bench_gpu.verdicts(ms)[2:]}
    assert by["delta f16 SpMV, 90% zeros >= 4.8x cuBLAS GEMV"].endswith("FAIL |")
    assert by["delta f16 SpMV, 90% zeros >= 2.6x cuSPARSE CSR"].endswith("FAIL |")
    assert by["delta f16 SpMV, 70% zeros >= 2.2x cuBLAS GEMV"].endswith("PASS |")
    assert by["stencil SpMV, DIA f32 <= 19 µs"].endswith("FAIL |")
    del ms["ustc CSR"]                                         # a row that did not run: no verdict
    assert not [line for line in bench_gpu.verdicts(ms) if "CSR f64" in line]
