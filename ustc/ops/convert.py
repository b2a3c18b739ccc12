"""``Tensor.convert`` as the compiled statement ``B[i, j, ...] = A[i, j, ...]``.

The generated kernel walks the source in its own format and writes the target
in its own format through the level types' write hooks (``codegen.writer``):
a counting pass, buffers sized from the counts (refused before allocation when
they would not fit the memory budget), a filling pass. It applies when the walk
meets the target's entries in the order of its levels; the kernel lives in the
kernel cache like every other, keyed by both formats' signatures.

A tensor on 'cuda' converts by the same statement on the cuda target (:func:`on_device`):
the writer's chunks run a thread each and the result's buffers stay on the device
(``ustc.ops.written``, "On the cuda target"). Pairs no such kernel writes are refused
with DeviceError, never copied through the host behind the caller's back.
"""

from __future__ import annotations

import warnings

import numpy as np

from .. import cache
from ..errors import ConversionWarning, DeviceError
from ..codegen import notation as nt
from ..codegen.plans import plans_of
from ..codegen.space import coiterable
from ..codegen.writer import own_walk_strategies, write_passes
from ..format.ir import TensorFormat
from ..tensor.fastpaths import compiled_dtype, family
from ..tensor.tensor import Tensor, as_format
from . import runtime


# Source entries from which ``Tensor.convert`` compiles: below, the NumPy path takes a few ms
# while a kernel's first compile on a machine takes ~0.5 s (then it loads from the cache).
COMPILE_FROM = 1 << 16


def copy_program(ndim: int) -> nt.Program:
    """``B[i0, i1, ...] = A[i0, i1, ...]``."""
    indices = tuple(f"i{d}" for d in range(ndim))
    return nt.Program((nt.Statement(nt.Access("B", indices), nt.Access("A", indices)),))


def _transposes(source: TensorFormat, target: str) -> bool:
    """The plan's conversion of the source is a counting transpose (CSC into CSR and back), never
    another generated conversion (which could ask for this one in turn)."""
    return family(source) is not None and family(as_format(target)) is not None


def writable(fmt: TensorFormat) -> bool:
    """Whether a walk in the order ``fmt`` asks for (``writer.output_order``) writes ``fmt``."""
    return own_walk_strategies(fmt, copy_program(fmt.ndim).statements[0].lhs.indices) is not None


def staged_rows(source: TensorFormat, shape: tuple[int, ...], fmt: TensorFormat) -> TensorFormat | None:
    """The CSR a 2-D dense ``source`` is selected into before the writer walks its nonzeros only,
    or None when the writer should walk the dense array itself. A target written in three
    passes (through a workspace: BSR, DIA; n:m blocks) walks its source three times: selecting
    once (two passes) and walking the nonzeros three times is faster. Appended targets take two, as the selection does,
    and skip the stage (its bytes would be extra peak memory beside the output) when the source
    is row-major. The stage has 16-bit coordinates when the columns fit (6 instead of 8 bytes
    per float32 entry)."""
    strategies = own_walk_strategies(fmt, copy_program(fmt.ndim).statements[0].lhs.indices)
    row_major = [lv.expr for lv in source.levels] == list(source.dims)
    if strategies is not None and write_passes(fmt, strategies) == 2 and row_major:
        return None
    width = 16 if shape[1] <= np.iinfo(np.uint16).max + 1 else 0
    return TensorFormat.parse("(i, j) -> (i : dense, j : compressed)" + (f", crdWidth = {width}" if width else ""))


def worth_compiling(t: Tensor) -> bool:
    """Whether ``Tensor.convert`` should take the generated kernel for ``t`` (see COMPILE_FROM)."""
    return t.nse >= COMPILE_FROM


def written(t: Tensor, fmt: TensorFormat) -> Tensor | None:
    """``t`` in ``fmt`` by a generated kernel that writes ``fmt`` in order, or None when no such
    kernel applies (the target's levels cannot be appended, the source must itself be converted
    first to be walked, the walk's order is not the target's, or Numba has no such dtype)."""
    program = copy_program(t.ndim)
    if t.device != "cpu" or not compiled_dtype(t.dtype) or not coiterable(t.format) or not writable(fmt):
        return None
    run = runtime.prepare(program, {"B": fmt, "A": t}, "cpu")
    with warnings.catch_warnings():  # transposing the source first is this plan's business, not news
        warnings.simplefilter("ignore", ConversionWarning)
        module, _ = cache.load(run.fields, run.generate)
    plan = plans_of(module)[0]
    if not plan.writer or not all(_transposes(t.format, target) for _, target in plan.convert):
        return None
    result = run.run()["B"]
    result = result.with_package(t.package)
    return result



def on_device(t: Tensor, fmt: TensorFormat) -> Tensor:
    """``t`` (a tensor on 'cuda') in ``fmt``, a new tensor on the device: the generated conversion
    kernel on the cuda target, its chunks spread over threads (the plan's ``split``). The same
    format gives a copy. DeviceError, naming both formats, when no such kernel writes the pair:
    the source cannot be walked as it is stored, the target's levels need a kernel-local
    workspace or a pass that collects (BSR, DIA, n:m), the walk's order is not the target's
    (a transpose), or Numba has no such dtype."""
    if fmt == t.format:
        return t.copy()

    def refuse(why: str) -> DeviceError:
        return DeviceError(f"converting a {t.format} tensor on '{t.device}' to {fmt}: {why}, so no CUDA kernel "
                           f"writes it; call t.to('cpu') first (and .to('{t.device}') on the result)")

    if not compiled_dtype(t.dtype):
        raise refuse(f"Numba compiles no kernel for {t.dtype} values")
    if t.format.batch_levels or fmt.batch_levels:
        raise refuse("batched storage lives on the host only")
    if not coiterable(t.format):
        raise refuse("the source's levels cannot be walked in their own order")
    if not writable(fmt):
        raise refuse("no walk writes the target's levels in order")
    run = runtime.prepare(copy_program(t.ndim), {"B": fmt, "A": t}, "cuda")
    with warnings.catch_warnings():  # a plan that converts the source first is refused below
        warnings.simplefilter("ignore", ConversionWarning)
        module, _ = cache.load(run.fields, run.generate)
    plan = plans_of(module)[0]
    if plan.convert:
        raise refuse(f"the walk needs the source converted first (to {', '.join(target for _, target in plan.convert)})")
    if not plan.split:
        raise refuse("no walk of the source meets the target's entries in chunks of its first level, in "
                     "order (a different leading index), or a target level needs a workspace or a "
                     "collecting pass (BSR, DIA, n:m)")
    result = run.run()["B"]
    result = result.with_package(t.package)
    return result
