"""tools/nvmath_compat.py rewrites nvmath imports, and nothing else."""

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "nvmath_compat.py"
spec = importlib.util.spec_from_file_location("nvmath_compat", SCRIPT)
nvmath_compat = importlib.util.module_from_spec(spec)
sys.modules.setdefault("nvmath_compat", nvmath_compat)  # dataclasses look their module up
spec.loader.exec_module(nvmath_compat)


def test_imports_are_rewritten():
    source = (
        "import nvmath\n"
        "from nvmath.sparse import ust\n"
        "from nvmath.sparse import Matmul, ust as u\n"
        "from nvmath.sparse.ust import Tensor, NamedFormats\n"
        "from nvmath.sparse.ust._converters import TensorDecomposer\n"
        "from nvmath.sparse.generic import Matmul\n"
        "    import nvmath\n"
        "x = nvmath.sparse.ust.Tensor  # import nvmath stays in a comment\n"
        "s = 'from nvmath.sparse.ust import Tensor'\n"
    )
    assert nvmath_compat.rewrite_imports(source).splitlines() == [
        "from ustc.ust import nvmath",
        "from ustc import ust",
        "from ustc import ust as u",
        "from ustc.ust import Matmul",
        "from ustc.ust import Tensor, NamedFormats",
        "from ustc.ust._converters import TensorDecomposer",
        "from ustc.ust import Matmul",
        "    from ustc.ust import nvmath",
        "x = nvmath.sparse.ust.Tensor  # import nvmath stays in a comment",
        "s = 'from nvmath.sparse.ust import Tensor'",
    ]


def test_rewritten_code_runs():
    namespace = {}
    exec(nvmath_compat.rewrite_imports("import nvmath\nfrom nvmath.sparse import ust\n"
                                       "import numpy as np\n"
                                       "t = nvmath.sparse.ust.Tensor.from_package(np.eye(3))\n"
                                       "fmt = ust.NamedFormats.CSR\n"), namespace)
    assert namespace["t"].extents == [3, 3] and namespace["fmt"].name == "CSR"


def test_gpu_only_examples_are_recognised():
    assert nvmath_compat.classify("import cupy as cp\n", example=True).startswith("GPU-only")
    assert nvmath_compat.classify("device_id = 0\n", example=True).startswith("GPU-only")
    assert nvmath_compat.classify("device_id = 'cpu'\nx = 1\n", example=True) is None
    assert nvmath_compat.classify("import cupy as cp\n", example=False) is None  # tests skip their own cases
