"""``Matmul`` / ``matmul`` with nvmath-python's signatures, over :class:`ustc.Matmul`.

``c := alpha * op(a) @ op(b) + beta * c``. The translation:

* UST operands (:class:`ustc.ust.Tensor`) go to ustc as they are, except dense ones,
  which go as the dense arrays they view; a dense UST ``c`` is updated in place and
  is what ``execute`` / ``matmul`` return, as in nvmath-python.
* ``qualifiers`` (``matmul_matrix_qualifiers_dtype``, one row per a, b, c): transposes of
  ``a`` and ``b`` become ustc's ``transpose_a`` / ``transpose_b``. ustc has no conjugating
  matmul, so a conjugated complex ``a`` or ``b`` is multiplied through a conjugated copy of
  its values, refreshed from the operand before every ``execute`` (in-place changes to the
  operand are seen, at the cost of one pass over its values); conjugating a real operand
  is nothing. Qualifying ``c`` raises :class:`ustc.UnsupportedOperation`.
* float16 and bfloat16 operands are computed in float32 on the CPU (nvmath-python's default
  compute type for them) and give float16 / bfloat16 results; bfloat16 comes as torch
  tensors (dense, sparse, TorchUST) or ml_dtypes arrays (:mod:`ustc.ops.narrow`).
* ``options`` (``MatmulOptions`` or a dict): ``codegen=True`` forces ustc's generated
  route; ``compute_type`` is the type the product is computed in: the operands' own
  (float32 for float16 / bfloat16), or a wider one of the same kind (float32 operands in
  float64), through twins of the operands in it, refreshed at every execute, the result
  cast back to the operands' type; a narrower one raises :class:`ustc.UnsupportedOperation`,
  real against complex ``ValueError``;
  ``logger`` receives the plan; ``memory_limit``, ``blocking`` and ``allocator`` are
  accepted and have nothing to act on.
* ``execution``: ``ExecutionCPU`` / ``"cpu"`` or ``ExecutionCUDA`` / ``"cuda"`` picks
  ustc's target. ``stream`` is accepted everywhere and unused.
* ``plan(prologs=..., epilog=..., semiring=...)``: forwarded to :meth:`ustc.Matmul.plan`, which
  compiles the Python functions into the generated kernel (``compile_matmul_*`` results carry
  the function; ustc needs no LTO-IR). A prolog on ``c`` raises
  :class:`ustc.UnsupportedOperation`.
"""

from __future__ import annotations

import dataclasses
import logging
from enum import IntEnum

import numpy as np

from ..errors import UnsupportedOperation
from ..ops import narrow
from ..tensor import packages
from ..ops.plan import Matmul as _UstcMatmul
from ..tensor.tensor import Tensor as _UstcTensor
from .tensor import Tensor, _adopt

__all__ = ["Matmul", "matmul", "MatmulOptions", "ExecutionCUDA", "ExecutionCPU", "ComputeType",
           "matmul_matrix_qualifiers_dtype", "compile_matmul_prolog", "compile_matmul_epilog",
           "compile_matmul_add", "compile_matmul_atomic_add", "compile_matmul_mul"]

matmul_matrix_qualifiers_dtype = np.dtype([("is_transpose", "<i4"), ("is_conjugate", "<i4")])


class ComputeType(IntEnum):
    """The compute types nvmath-python names (CUDA ``cudaDataType`` values)."""

    CUDA_R_32F = 0
    CUDA_R_64F = 1
    CUDA_C_32F = 4
    CUDA_C_64F = 5


_COMPUTE_DTYPES = {ComputeType.CUDA_R_32F: np.float32, ComputeType.CUDA_R_64F: np.float64,
                   ComputeType.CUDA_C_32F: np.complex64, ComputeType.CUDA_C_64F: np.complex128}


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExecutionCUDA:
    """Run on a CUDA device (ustc's ``target="cuda"``)."""

    device_id: int = 0
    name = "cuda"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExecutionCPU:
    """Run on the host (ustc's ``target="cpu"``)."""

    num_threads: int | None = None
    name = "cpu"


@dataclasses.dataclass
class MatmulOptions:
    """nvmath-python's matmul options (see the module docstring for what each does here)."""

    codegen: bool = False
    compute_type: int | None = None
    logger: logging.Logger | None = None
    memory_limit: int | str | None = "80%"
    blocking: bool | str = "auto"
    allocator: object | None = None

    def __post_init__(self):
        if self.compute_type is not None:
            self.compute_type = ComputeType(self.compute_type)
        if self.blocking not in (True, "auto"):
            raise ValueError(f"blocking must be True or 'auto', got {self.blocking!r}")


@dataclasses.dataclass(frozen=True)
class CompiledOperation:
    """What a ``compile_matmul_*`` helper returns: the Python function and what it is for
    (``Matmul.plan`` hands the function to ustc, which compiles it into the kernel)."""

    kind: str
    function: object
    dtype: str | None = None
    operand_label: str | None = None


def _function(op):
    """The Python function behind a ``compile_matmul_*`` result (ustc compiles it itself); other
    values pass through."""
    return op.function if isinstance(op, CompiledOperation) else op


def compile_matmul_prolog(prolog, *, operand_label, dtype, compute_capability=None):
    return CompiledOperation("prolog", prolog, str(dtype), operand_label)


def compile_matmul_epilog(epilog, *, dtype, compute_capability=None):
    return CompiledOperation("epilog", epilog, str(dtype))


def compile_matmul_add(add, *, dtype, compute_capability=None):
    return CompiledOperation("add", add, str(dtype))


def compile_matmul_atomic_add(atomic_add, *, dtype, compute_capability=None):
    return CompiledOperation("atomic_add", atomic_add, str(dtype))


def compile_matmul_mul(mul, *, dtype, compute_capability=None):
    return CompiledOperation("mul", mul, str(dtype))


# -- translation -----------------------------------------------------------------------------------
def _options(options) -> MatmulOptions:
    if options is None:
        return MatmulOptions()
    if isinstance(options, MatmulOptions):
        return options
    if isinstance(options, dict):
        return MatmulOptions(**options)
    raise TypeError(f"options must be MatmulOptions or a dict, got {type(options).__name__}")


def _target(execution) -> str | None:
    if execution is None:
        return None
    if isinstance(execution, (ExecutionCPU, ExecutionCUDA)):
        return execution.name
    if isinstance(execution, str) and execution.lower() in ("cpu", "cuda"):
        return execution.lower()
    if isinstance(execution, dict):
        return "cpu" if "num_threads" in execution else "cuda"
    raise TypeError(f"execution must be ExecutionCPU, ExecutionCUDA, 'cpu' or 'cuda', got {execution!r}")


def _dense(x) -> bool:
    return isinstance(x, _UstcTensor) and x.format.all_dense


def _operand(x):
    """What ustc gets for an operand: dense USTs as the arrays they view."""
    return x.to_dense() if _dense(x) else x


def _dtype_of(x):
    """``x``'s value dtype; float32 stands for bfloat16 (no NumPy dtype), which ustc computes in."""
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return None
    name = str(dtype).replace("torch.", "")
    return np.dtype(np.float32) if name == "bfloat16" else np.dtype(name)


def _compute_dtype(*operands):
    """The type ustc computes the product in: the operands' result type, float32 for float16 and
    bfloat16 (nvmath-python's default compute type for them, ustc's on the CPU)."""
    dtypes = [d for d in map(_dtype_of, operands) if d is not None]
    natural = np.result_type(*dtypes) if dtypes else None
    return np.dtype(np.float32) if natural == np.float16 else natural


def _qualifiers(qualifiers) -> tuple[tuple[bool, bool], tuple[bool, bool]]:
    """``((transpose_a, transpose_b), (conjugate_a, conjugate_b))``."""
    if qualifiers is None:
        return (False, False), (False, False)
    q = np.asarray(qualifiers)
    if q.dtype != matmul_matrix_qualifiers_dtype or q.shape != (3,):
        raise ValueError("qualifiers must be a length-3 array of matmul_matrix_qualifiers_dtype (a, b, c)")
    if q[2]["is_transpose"] or q[2]["is_conjugate"]:
        raise UnsupportedOperation("matmul qualifiers on c: ustc updates c as given (no transpose or conjugate)")
    return (bool(q[0]["is_transpose"]), bool(q[1]["is_transpose"])), (bool(q[0]["is_conjugate"]),
                                                                        bool(q[1]["is_conjugate"]))


class _Conjugated:
    """The conjugate of a complex operand: a copy of its values, refreshed by ``refresh()``."""

    def __init__(self, x, label: str):
        if packages.device_of(x) != "cpu" or getattr(x, "device", "cpu") == "cuda":
            raise UnsupportedOperation(f"matmul: conjugating operand {label} on a CUDA device")
        if not isinstance(x, np.ndarray) and not (packages.is_torch(x) and x.layout == x.new_empty(0).layout):
            source = x if isinstance(x, _UstcTensor) else _UstcTensor.from_package(x)
            self.source, self.operand = source.raw_values, source.copy()
            self.target = self.operand.raw_values
        else:
            self.source = packages.host_array(x)
            self.operand = self.target = np.empty_like(self.source)
        self.refresh()

    def refresh(self) -> None:
        np.conjugate(self.source, out=self.target)


def _prepared(x, conjugate: bool, label: str):
    """``(what ustc multiplies, the conjugated copy to refresh or None)``."""
    x = _operand(x)
    dtype = _dtype_of(x)
    if conjugate and x is not None and (dtype is None or dtype.kind == "c"):
        conj = _Conjugated(x, label)
        return conj.operand, conj
    return x, None


class Matmul:
    """Stateful ``alpha * op(a) @ op(b) + beta * c`` (see the module docstring)."""

    def __init__(self, a, b, /, c=None, *, alpha=None, beta=None, qualifiers=None, options=None, execution=None,
                 stream=None):
        self.options = _options(options)
        self.logger = self.options.logger or logging.getLogger()
        self.execution = execution
        self._transposes, self._conjugates = _qualifiers(qualifiers)
        self._c = c
        self._raw = (a, b, c)
        self._compute = self._compute_type(a, b, c)
        self._target = _target(execution)
        a_op, b_op, c_op = self._operands(a, b, c)
        ustc_options = {}
        if self.options.codegen:
            ustc_options["route"] = "generated"
        if self._target is not None:
            ustc_options["target"] = self._target
        self._mm = _UstcMatmul(a_op, b_op, c_op, 1 if alpha is None else alpha, beta,
                               transpose_a=self._transposes[0], transpose_b=self._transposes[1],
                               options=ustc_options)
        self._like = a if isinstance(a, Tensor) else b if isinstance(b, Tensor) else None

    def _compute_type(self, *operands) -> np.dtype | None:
        """The dtype the product is computed in: ``MatmulOptions.compute_type`` where given (the
        operands' own, float32 for float16 / bfloat16, or a wider one of the same kind: the
        operands are then computed through twins in it), else ustc's natural one."""
        natural = _compute_dtype(*operands)
        wanted = self.options.compute_type
        if wanted is None or natural is None:
            return natural
        dtype = np.dtype(_COMPUTE_DTYPES[wanted])
        if (dtype.kind == "c") != (natural.kind == "c"):
            raise ValueError(f"MatmulOptions(compute_type={wanted.name}) for {natural} operands: real and "
                             f"complex do not mix")
        bfloat16 = any(str(getattr(x, "dtype", "")).endswith("bfloat16") for x in operands)
        if dtype != natural and (not np.can_cast(natural, dtype, "safe") or bfloat16):
            raise UnsupportedOperation(f"MatmulOptions(compute_type={wanted.name}): ustc computes these "
                                       f"operands in {natural}" + ("" if bfloat16 else " or a wider type"))
        return dtype

    def _operands(self, a, b, c) -> tuple:
        """What ustc multiplies for ``a``, ``b``, ``c``: dense USTs as their arrays, bfloat16
        operands as float32 twins on the CPU (CUDA kernels read bfloat16 themselves), all of them in the compute type where a wider one was asked for
        (:mod:`ustc.ops.narrow`), conjugated complex ones as conjugated copies; all refreshed
        before every execute."""
        ops = [_operand(x) for x in (a, b, c)]
        wider = self._compute != _compute_dtype(*ops)
        self._wide = narrow.computed_in(*ops, None, self._compute) if wider else \
            narrow.bfloat16_product(*ops, target=self._target)
        if self._wide is not None:
            ops = list(self._wide.operands[:3])
        self._refresh = {}
        for k, label in enumerate("ab"):
            ops[k], self._refresh[label] = _prepared(ops[k], self._conjugates[k], label)
        return tuple(ops)

    def __enter__(self) -> "Matmul":
        return self

    def __exit__(self, *exc) -> None:
        self.free()

    def plan(self, *, prologs=None, epilog=None, epilogs=None, semiring=None, compute_capability=None,
             stream=None) -> None:
        if epilog is not None and epilogs is not None:
            raise UnsupportedOperation("Matmul.plan: give epilog= or epilogs=, not both")
        self._mm.plan(prologs=None if prologs is None else {k: _function(f) for k, f in prologs.items()},
                      epilog=_function(epilog if epilog is not None else epilogs),
                      semiring=None if semiring is None else
                      {k: _function(f) for k, f in semiring.items()} if isinstance(semiring, dict) else semiring)
        self.logger.info("ustc matmul plan: %s", self._mm.plan_info)

    def execute(self, *, release_workspace=False, stream=None):
        if self._wide is not None:
            self._wide.refresh()
        for conj in self._refresh.values():
            if conj is not None:
                conj.refresh()
        result = self._mm.execute()
        if self._wide is not None:
            result = self._wide.finish(result)
        return self._result(result)

    def _result(self, result):
        if self._c is not None and _dense(self._c):
            return self._c
        if isinstance(result, _UstcTensor) and not isinstance(result, Tensor):
            return _adopt(result)
        if self._like is not None and not isinstance(result, _UstcTensor) and self._c is None:
            return Tensor.from_package(result)
        return result

    def reset_operands(self, *, a=None, b=None, c=None, alpha=None, beta=None, stream=None) -> None:
        self._reset(self._mm.reset_operands, a, b, c, alpha, beta)

    def reset_operands_unchecked(self, *, a=None, b=None, c=None, alpha=None, beta=None, stream=None) -> None:
        reset = getattr(self._mm, "reset_operands_unchecked", self._mm.reset_operands)
        self._reset(reset, a, b, c, alpha, beta)

    def _reset(self, reset, a, b, c, alpha, beta) -> None:
        if c is not None:
            self._c = c
        self._raw = tuple(old if new is None else new for old, new in zip(self._raw, (a, b, c)))
        a_op, b_op, c_op = self._operands(*self._raw)   # twins and copies are new: all are handed over
        reset(a=a_op, b=b_op, c=c_op, alpha=alpha, beta=beta)

    def release_operands(self) -> None:
        release = getattr(self._mm, "release_operands", None)
        if release is not None:
            release()
        self._raw, self._wide = (None, None, None), None

    def free(self) -> None:
        free = getattr(self._mm, "free", None) or self._mm.release
        free()


def matmul(a, b, /, c=None, *, alpha=None, beta=None, qualifiers=None, prologs=None, epilog=None, semiring=None,
           compute_capability=None, options=None, execution=None, stream=None):
    """One-shot :class:`Matmul`: plan, execute, free."""
    with Matmul(a, b, c, alpha=alpha, beta=beta, qualifiers=qualifiers, options=options, execution=execution,
                stream=stream) as mm:
        mm.plan(prologs=prologs, epilog=epilog, semiring=semiring, compute_capability=compute_capability,
                stream=stream)
        return mm.execute(stream=stream)
