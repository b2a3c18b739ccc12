"""Stands in for the ``nvmath`` package: ``import nvmath`` becomes ``from ustc.ust import nvmath``,
and ``nvmath.sparse.ust.Tensor``, ``nvmath.sparse.matmul`` ... then resolve to ustc."""

from . import sparse  # noqa: F401
