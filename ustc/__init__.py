"""ustc: a sparse tensor compiler for Python.

Formats are written in a small DSL (``(i, j) -> (j : dense, i : compressed)``)
or built from objects; see ``docs/dsl.md``.
"""

from . import _threads  # noqa: F401  (first: idle OpenMP workers must sleep; see ustc/_threads.py)
from . import cache, formats, kernels
from . import prune  # noqa: E402  (ustc.prune: n:m and magnitude pruning)
from ._version import __version__
from .errors import (ConversionWarning, DeviceError, DistributedError, FileFormatError, FormatError,
                     FormatSemanticError, FormatSyntaxError, IndexingError, KernelError, MissingDependencyError,
                     ShapeError, SolveError, StorageError,
                     UnsupportedOperation, UstcError)
from .format import Dimension, LevelFormat, LevelProperty, TensorFormat, parse
from .ops.einsum import einsum
from .ops.jit import jit
from .ops.matmul import matmul
from .ops.plan import Matmul
from .codegen.semiring import Semiring
from .ops.solve import SolveInfo, solve
from .tensor import Tensor
from .tensor.io import from_file, to_file
from .tensor.sparsify import sparse_relu, sparsify
from .ops.linop import aslinearoperator
from .tensor.construct import block, concatenate, diags, eye, hstack, kron, random, vstack
from .ops.warm import warm_cache

__all__ = ["__version__", "cache", "prune", "einsum", "jit", "matmul", "Matmul", "Semiring", "solve", "SolveInfo", "kernels", "formats", "Dimension", "LevelFormat", "LevelProperty", "TensorFormat", "parse", "Tensor", "sparsify", "sparse_relu", "from_file", "to_file",
           "aslinearoperator", "eye", "diags", "random", "kron", "vstack", "hstack", "block", "concatenate",
           "warm_cache",
           "UstcError", "FormatError", "FormatSyntaxError", "FormatSemanticError", "StorageError", "ShapeError",
           "DeviceError", "IndexingError", "KernelError", "UnsupportedOperation", "FileFormatError", "SolveError", "DistributedError",
           "MissingDependencyError", "ConversionWarning"]
