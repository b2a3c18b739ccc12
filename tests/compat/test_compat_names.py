"""ustc.ust offers nvmath-python's public UST names, with its keyword arguments."""

import inspect

import pytest

import ustc
from ustc import ust
from ustc.ust import nvmath

PUBLIC = ["Tensor", "TensorFormat", "NamedFormats", "Dimension", "LevelExpr", "LevelFormat", "LevelProperty",
          "is_ordered", "is_unique", "Matmul", "matmul", "MatmulOptions", "ExecutionCUDA", "ExecutionCPU",
          "ComputeType", "matmul_matrix_qualifiers_dtype", "compile_matmul_prolog", "compile_matmul_epilog",
          "compile_matmul_add", "compile_matmul_atomic_add", "compile_matmul_mul"]


@pytest.mark.parametrize("name", PUBLIC)
def test_public_name_exists(name):
    assert name in ust.__all__
    assert getattr(ust, name) is not None


def test_nvmath_stand_in_reaches_the_same_objects():
    assert nvmath.sparse.ust is ust
    assert nvmath.sparse.ust.Tensor is ust.Tensor
    assert nvmath.sparse.matmul is ust.matmul and nvmath.sparse.Matmul is ust.Matmul
    assert nvmath.sparse.MatmulOptions is ust.MatmulOptions


def test_compat_tensor_is_a_ustc_tensor():
    assert issubclass(ust.Tensor, ustc.Tensor)


def test_enums_have_nvmath_members():
    assert [m.name for m in ust.LevelFormat][:7] == ["DENSE", "BATCH", "COMPRESSED", "SINGLETON", "RANGE",
                                                     "DELTA", "STRUCTURED"]
    assert {"UNIQUE", "NONUNIQUE", "ORDERED", "UNORDERED"} <= set(ust.LevelProperty.__members__)
    assert ust.LevelProperty.NONORDERED is ust.LevelProperty.UNORDERED
    assert {"CUDA_R_32F", "CUDA_R_64F", "CUDA_C_32F", "CUDA_C_64F"} <= set(ust.ComputeType.__members__)
    assert ust.matmul_matrix_qualifiers_dtype.names == ("is_transpose", "is_conjugate")


def _accepts(fn, *args, **kwargs):
    inspect.signature(fn).bind(*args, **kwargs)


def test_tensor_methods_take_nvmath_keywords():
    T = ust.Tensor
    _accepts(T.__init__, None, (2, 2), tensor_format=None, index_type="int32", dtype="float32", package=None,
             options=None, stream=None)
    _accepts(T.from_package, None, stream=None)
    _accepts(T.from_file, "a.mtx", stream=None)
    _accepts(T.to_package, None, options=None, stream=None)
    _accepts(T.convert, None, tensor_format=None, index_type=None, dtype=None, copy=None, stream=None)
    _accepts(T.to, None, device_id="cpu", stream=None)
    _accepts(T.copy_, None, None, stream=None)
    _accepts(T.clone, None, stream=None)
    _accepts(T.set_kernel, None, abs, with_indices=False, arch=None)
    _accepts(T.run_kernel, None, stream=None)
    _accepts(T.get_value, None, [0, 0], stream=None)
    for method in (T.draw, T.draw_storage, T.draw_raw, T.animate):
        _accepts(method, None, name=None, stream=None)
    for attribute in ("extents", "shape", "levels", "size", "num_dimensions", "num_levels", "tensor_format",
                      "index_type", "dtype", "val", "device", "device_id", "nse", "base"):
        assert hasattr(T, attribute), attribute
    assert callable(T.pos) and callable(T.crd)


def test_matmul_takes_nvmath_keywords():
    _accepts(ust.Matmul.__init__, None, "a", "b", "c", alpha=1, beta=1, qualifiers=None, options=None,
             execution=None, stream=None)
    _accepts(ust.matmul, "a", "b", "c", alpha=1, beta=1, qualifiers=None, prologs=None, compute_capability=None,
             options=None, execution=None, stream=None)
    _accepts(ust.Matmul.plan, None, prologs=None, compute_capability=None, stream=None)
    _accepts(ust.Matmul.execute, None, release_workspace=False, stream=None)
    for reset in (ust.Matmul.reset_operands, ust.Matmul.reset_operands_unchecked):
        _accepts(reset, None, a=None, b=None, c=None, alpha=None, beta=None, stream=None)
    for method in ("release_operands", "free", "__enter__", "__exit__"):
        assert hasattr(ust.Matmul, method)
    assert ust.MatmulOptions(codegen=True, compute_type=ust.ComputeType.CUDA_R_64F, logger=None, memory_limit="50%",
                             blocking=True, allocator=None).codegen
    assert ust.ExecutionCUDA(device_id=0).device_id == 0 and ust.ExecutionCPU(num_threads=2).num_threads == 2


def test_format_objects_have_slots():
    for cls in (ust.Dimension, ust.LevelExpr, ust.TensorFormat):
        assert hasattr(cls, "__slots__")
    assert not hasattr(ust.Dimension(dimension_name="i"), "__dict__")
