"""ustc: a sparse tensor compiler for Python.

Formats are written in a small DSL (``(i, j) -> (j : dense, i : compressed)``)
or built from objects; see ``docs/dsl.md``.
"""

import importlib

from . import _threads  # noqa: F401  (first: idle OpenMP workers must sleep; see ustc/_threads.py)
from . import cache, formats, kernels
from ._version import __version__
from .errors import (ConversionWarning, DeviceError, DistributedError, FileFormatError, FormatError,
                     FormatSemanticError, FormatSyntaxError, IndexingError, KernelError, MissingDependencyError,
                     ShapeError, SolveError, StorageError,
                     UnsupportedOperation, UstcError)
from .format import Dimension, LevelFormat, LevelProperty, TensorFormat, parse
from .ops.matmul import matmul
from .ops.plan import Matmul
from .ops.solve import SolveInfo, solve
from .tensor import Tensor
from .tensor.io import from_file, to_file

#: names re-exported on first use (PEP 562): modules a script that never calls them does not
#: load at ``import ustc`` (name -> module that defines it; None: the submodule itself)
_LAZY = {"prune": None, "einsum": ".ops.einsum", "jit": ".ops.jit", "Semiring": ".codegen.semiring",
         "sparsify": ".tensor.sparsify", "sparse_relu": ".tensor.sparsify", "aslinearoperator": ".ops.linop",
         **{name: ".tensor.construct" for name in ("block", "concatenate", "diags", "eye", "hstack", "kron",
                                                    "random", "vstack")},
         "warm_cache": ".ops.warm"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'ustc' has no attribute {name!r}")
    where = _LAZY[name]
    value = importlib.import_module(f".{name}" if where is None else where, __name__)
    if where is not None:
        value = getattr(value, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["__version__", "cache", "prune", "einsum", "jit", "matmul", "Matmul", "Semiring", "solve", "SolveInfo", "kernels", "formats", "Dimension", "LevelFormat", "LevelProperty", "TensorFormat", "parse", "Tensor", "sparsify", "sparse_relu", "from_file", "to_file",
           "aslinearoperator", "eye", "diags", "random", "kron", "vstack", "hstack", "block", "concatenate",
           "warm_cache",
           "UstcError", "FormatError", "FormatSyntaxError", "FormatSemanticError", "StorageError", "ShapeError",
           "DeviceError", "IndexingError", "KernelError", "UnsupportedOperation", "FileFormatError", "SolveError", "DistributedError",
           "MissingDependencyError", "ConversionWarning"]
