"""Fixtures shared by the CUDA tests that run kernels without a GPU."""

from __future__ import annotations

import functools

import pytest

from ustc.codegen import warp_model
from ustc.ops import cuda_host


@pytest.fixture
def model(monkeypatch, tmp_path):
    """Launches run in the lock-step warp model (kernels cached under ``tmp_path``); returns the
    launch log."""
    monkeypatch.setenv("USTC_CACHE_DIR", str(tmp_path / "cache"))
    log: list = []

    def launcher(module, name, views):
        return functools.partial(warp_model.launch, module, name, getattr(module, "launch_" + name), log=log)

    monkeypatch.setattr(cuda_host, "launcher", launcher)
    return log
