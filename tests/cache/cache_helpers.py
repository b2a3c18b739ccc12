"""Shared helpers of the kernel-cache tests (also imported by their worker processes)."""

from __future__ import annotations

# A tiny kernel: Numba-cached, cheap to compile, and callable without compiling via k.py_func.
NUMBA_SOURCE = """from numba import njit


@njit(cache=True)
def k(x):
    return x * 2.0 + {offset}
"""


def numba_source(offset: int = 1) -> str:
    return NUMBA_SOURCE.format(offset=offset)


def fields(op: str = "y(i) = 2 * x(i) + 1", **extra) -> dict:
    base = {"op": op, "formats": ["(d0, d1) -> (d0 : dense, d1 : compressed)"],
            "dtypes": ["float64", "int32"], "target": "cpu"}
    base.update(extra)
    return base


class Generator:
    """A ``generate`` callable that counts its calls."""

    def __init__(self, text: str):
        self.text = text
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        return self.text
