"""Modules outside ``ustc.tensor`` use a Tensor's public API (``raw_values``, ``raw_buffers``,
``layout``, ``with_package``, ``assign``, ...), never its private storage fields: the Tensor may
change how it stores itself without breaking routes, kernels or the PyTorch layer."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

import ustc

ROOT = Path(ustc.__file__).resolve().parent
PRIVATE = re.compile(r"(?<![\w.])(?!self\b|cls\b)(\w+)\._(values|buffers|layout|package|device|counts|origin|flatten)\b(?!\()")
# ust.Tensor subclasses Tensor (nvmath-python's names over the same storage): its own fields.
OWNERS = ("tensor/", "ust/tensor.py")


def _offenders():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(OWNERS):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if PRIVATE.search(line.split("#")[0]):
                yield f"ustc/{rel}:{number}: {line.strip()}"


def test_no_module_outside_ustc_tensor_reads_a_tensors_private_fields():
    assert list(_offenders()) == []


def test_the_pattern_catches_what_it_forbids():
    assert PRIVATE.search("pos = a._buffers[(1, 'pos')]") and PRIVATE.search("t._package = 'torch'")
    assert not PRIVATE.search("self._values = v") and not PRIVATE.search("x._values().view(dtype)")


def test_raw_storage_is_the_tensors_own_and_read_only_where_it_says_so():
    t = ustc.Tensor.from_dense(np.array([[1.0, 0.0], [0.0, 2.0]]), "CSR")
    assert np.shares_memory(t.raw_values, t.values) and t.raw_buffer(1, "crd") is t.raw_buffers[(1, "crd")]
    try:
        t.raw_buffers[(1, "crd")] = None
    except TypeError:
        pass
    else:
        raise AssertionError("raw_buffers must be read-only")
    as_torch = t.with_package("torch")
    assert as_torch.package == "torch" and t.package == "numpy" and as_torch.raw_values is t.raw_values
    out = ustc.Tensor.from_dense(np.zeros((2, 2)), "CSR").with_package("torch")
    assert out.assign(t) is out and out.package == "torch" and out.raw_values is t.raw_values
    assert t.flat_storage()[1] is t.raw_values
