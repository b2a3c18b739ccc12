"""Fresh names for one generated kernel.

Every variable the compiler invents (cursor positions ``A_p1``, coordinates,
run ends, accumulators, unrolled and tiled loop variables) comes from one
:class:`FreshNames` per kernel. A name is derived from what it holds (tensor,
level, role) and made unique against the *reserved* names (tensors, indices,
scalars, the kernel's parameters, the target's builtins) and every name handed
out before it, by a numeric suffix. Asking again under the same key returns the
same name, so the stages that meet one variable agree on it without passing
strings around.

Why: names built by pasting strings collide. ``y[i] += A[i, j] * A_0[i, j] *
A[i, j]`` reads ``A`` twice (its accesses were prefixed ``A_0`` and ``A_2``)
next to a tensor named ``A_0``: two cursors were both ``A_0_p1`` and the
kernel silently returned wrong numbers.
"""

from __future__ import annotations

from typing import Hashable, Iterable

# Names the emitted module itself uses (imports, builtins the emitters call).
BUILTINS = frozenset({"np", "numba", "njit", "prange", "cuda", "math", "range", "min", "max", "len", "abs",
                      "int", "float", "bool", "True", "False", "None", "result"})


def buffer_name(tensor: str, buf: str, level: int | None = None) -> str:
    """A tensor's buffer as a kernel parameter: ``A_lvl1_pos`` (``pos``, ``crd``, ``size``, ``lo`` of
    a level) or ``A_vals``. Tensor names are unique, so these are too; fresh names avoid them."""
    return f"{tensor}_{buf}" if level is None else f"{tensor}_lvl{level}_{buf}"


class FreshNames:
    """Unique names under keys; see the module docstring."""

    def __init__(self, reserved: Iterable[str] = ()):
        self._taken: set[str] = set(BUILTINS) | set(reserved)
        self._by_key: dict[Hashable, str] = {}

    def __call__(self, key: Hashable, base: str) -> str:
        """The name for ``key``: ``base`` when free, else ``base_2``, ``base_3``, ..."""
        known = self._by_key.get(key)
        if known is not None:
            return known
        name, n = base, 2
        while name in self._taken:
            name, n = f"{base}_{n}", n + 1
        self._taken.add(name)
        self._by_key[key] = name
        return name

    def __contains__(self, name: str) -> bool:
        return name in self._taken
