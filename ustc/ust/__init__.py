"""nvmath-python's UST interface on ustc: code written for ``nvmath.sparse.ust`` and
``nvmath.sparse.Matmul`` / ``matmul`` runs after changing its imports::

    from nvmath.sparse import ust          ->  from ustc import ust
    from nvmath.sparse.ust import Tensor   ->  from ustc.ust import Tensor
    from nvmath.sparse import Matmul       ->  from ustc.ust import Matmul
    import nvmath                          ->  from ustc.ust import nvmath

See ``docs/compat.md`` for what differs on purpose.
"""

from .formats import (Dimension, FormatTypeError, LevelExpr, LevelFormat, LevelProperty, TensorFormat,
                      is_ordered, is_unique)
from .matmul import (ComputeType, ExecutionCPU, ExecutionCUDA, Matmul, MatmulOptions, compile_matmul_add,
                     compile_matmul_atomic_add, compile_matmul_epilog, compile_matmul_mul, compile_matmul_prolog,
                     matmul, matmul_matrix_qualifiers_dtype)
from .named import NamedFormats
from .tensor import Tensor

__all__ = ["Tensor", "TensorFormat", "NamedFormats", "Dimension", "LevelExpr", "LevelFormat", "LevelProperty",
           "is_ordered", "is_unique", "FormatTypeError", "Matmul", "matmul", "MatmulOptions", "ExecutionCUDA",
           "ExecutionCPU", "ComputeType", "matmul_matrix_qualifiers_dtype", "compile_matmul_prolog",
           "compile_matmul_epilog", "compile_matmul_add", "compile_matmul_atomic_add", "compile_matmul_mul"]
