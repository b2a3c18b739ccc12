"""Host side of generated kernels: bind operands, fetch the kernel, run it, assemble outputs.

``execute(program, bindings)`` is what ``@ustc.jit``, ``ustc.einsum`` and the
Tensor operators call. Operands are classified (a ``ustc.Tensor`` is stored in
its format; a NumPy array or CPU torch tensor is dense; an output may also be a
format, which makes a new tensor), checked (ranks, index extents, devices), and
described by a key — operation text, operand formats, dtypes, target — under
which the kernel cache (``ustc.cache``) keeps the generated module. Each
statement then runs: operands the plan names are converted first, a dense
output is zero-filled for ``=`` (filled with the semiring's ``𝟘``), and a
sparse output is counted, filled and assembled into its format.

Semirings and epilogs on the host: a dense output's epilog runs as the
module's ``<kernel>_epilog`` pass when the kernel could not fuse it; a sparse
output assembled from coordinate lists has its duplicates folded with ⊕
(:func:`combine`), the epilog applied to its entries, and — under a semiring
other than plus-times — keeps every entry, zeros included (:func:`structural`:
its pattern is structural, absent means ``𝟘``). Programs that call a user
function without a stable key (``codegen.functions``) are compiled in memory
and never written to the kernel cache.
"""

from __future__ import annotations

import atexit
import math
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import cache
from .._version import __version__
from ..errors import DeviceError, KernelError, ShapeError, UnsupportedOperation
from ..format import levels
from ..format.ir import TensorFormat
from ..tensor import packages
from ..tensor.dtypes import index_dtype
from ..tensor.safety import ensure_safe
from ..tensor.tensor import Tensor, as_format
from ..codegen import functions as user_functions
from ..codegen import notation as nt
from ..codegen.plans import StatementPlan, plans_of, plans_text
from ..codegen.roles import Kind
from . import written
from .operands import dtype_name

TARGETS = ("cpu", "cuda")


@dataclass
class Bound:
    """One tensor of the program as the kernel sees it."""

    name: str
    value: object            # Tensor, ndarray, or None for a new output
    format: TensorFormat | None
    shape: tuple[int, ...] | None
    dtype: np.dtype

    @property
    def sparse(self) -> bool:
        return self.format is not None


def execute(program: nt.Program, bindings: dict, target: str | None = None, schedule=None) -> dict:
    """Run ``program``; returns ``{output name: result}`` (arrays updated in place, new tensors).

    ``target`` None: ``cuda`` when the operands live there, else ``cpu``. ``schedule``
    (cuda only): a :class:`ustc.codegen.emit_cuda.Schedule` or its kind, e.g. ``"warp_per_row"``."""
    run = prepare(program, bindings, target, schedule)
    return run.run()


def source(program: nt.Program, bindings: dict, target: str | None = None, schedule=None) -> str:
    """The generated kernel module's text for these operands."""
    run = prepare(program, bindings, target, schedule)
    return run.module_source()


def prepare(program: nt.Program, bindings: dict, target: str | None, schedule=None) -> "Run":
    from . import cuda_host

    device = cuda_host.check_devices(bindings)
    target = target or ("cuda" if device == "cuda" else "cpu")
    if target not in TARGETS:
        raise UnsupportedOperation(f"target {target!r} is not available (targets: {', '.join(TARGETS)})")
    tensors = {}
    for name in program.tensors:
        if name not in bindings:
            raise KernelError(f"no operand bound to tensor '{name}'")
        tensors[name] = _bind(name, bindings[name], name in program.outputs, target)
    scalars = {s: bindings[s] for st in program.statements for s in st.rhs.scalars()}
    extents = _extents(program, tensors)
    _settle_outputs(program, tensors, extents, scalars)
    if target == "cpu":
        _no_bfloat16(tensors)
    return Run(program, tensors, scalars, extents, target, schedule, device)


def _bind(name: str, value, is_output: bool, target: str = "cpu") -> Bound:
    if target == "cuda" and not isinstance(value, (Tensor, str, TensorFormat)):
        from .cuda_host import device_array

        array = device_array(value)
        if array is not None:
            return Bound(name, array, None, tuple(array.shape), np.dtype(array.dtype))
    if isinstance(value, Tensor):
        if value.device != "cpu" and target != "cuda":
            raise DeviceError(f"tensor '{name}' is on {value.device}; the cpu target needs host tensors")
        ensure_safe(value)             # index buffers in bounds before the kernel reads them (cached)
        return Bound(name, value, value.format, value.shape, np.dtype(value.dtype))
    if isinstance(value, (str, TensorFormat)):
        if not is_output:
            raise KernelError(f"'{name}' is read by the kernel but bound to a format, not a tensor")
        return Bound(name, None, as_format(value), None, np.dtype(np.float64))
    if packages.is_cupy(value) or (packages.is_torch(value) and value.device.type != "cpu"):
        raise DeviceError(f"tensor '{name}' lives on a GPU; the cpu target needs host arrays")
    array = packages.host_array(value)
    if is_output and not array.flags.writeable:
        raise KernelError(f"output '{name}' is a read-only array")
    return Bound(name, array, None, array.shape, array.dtype)


def _no_bfloat16(tensors: dict) -> None:
    """UnsupportedOperation naming the first bfloat16 tensor: generated CPU kernels run in Numba,
    which has no bfloat16 (the cuda target reads it, ``codegen.cuda_bfloat16``)."""
    for name, b in tensors.items():
        if b.dtype.name == "bfloat16":
            raise UnsupportedOperation(f"tensor '{name}' holds bfloat16 values, which kernels generated for the "
                                       f"cpu target cannot read (Numba has no bfloat16): ustc.matmul / ustc.Matmul "
                                       f"compute bfloat16 products in float32, or convert '{name}' to float32 "
                                       f"(the cuda target reads bfloat16)")


def _extents(program: nt.Program, tensors: dict) -> dict[str, int]:
    extents: dict[str, tuple[int, str]] = {}
    for st in program.statements:
        for access in [st.lhs, *st.rhs.accesses()]:
            b = tensors[access.tensor]
            if b.shape is None:
                continue
            if len(b.shape) != len(access.indices):
                raise KernelError(_at(access, f"'{access.tensor}' has {len(b.shape)} dimensions but is indexed "
                                              f"with {len(access.indices)} ({access})"))
            for d, (index, n) in enumerate(zip(access.indices, b.shape)):
                seen = extents.setdefault(index, (n, f"{access.tensor} dimension {d}"))
                if seen[0] != n:
                    raise ShapeError(_at(access, f"index '{index}' has extent {seen[0]} from {seen[1]} but "
                                                 f"{n} from {access.tensor} dimension {d}"))
    return {k: v[0] for k, v in extents.items()}


def _settle_outputs(program, tensors, extents, scalars) -> None:
    """Shapes and dtypes of outputs that are formats (new tensors)."""
    for st in program.statements:
        b = tensors[st.lhs.tensor]
        if b.value is not None:
            continue
        missing = [i for i in st.lhs.indices if i not in extents]
        if missing:
            raise ShapeError(_at(st.lhs, f"cannot tell the extent of {missing} for output '{b.name}'"))
        if b.format.ndim != len(st.lhs.indices):
            raise KernelError(_at(st.lhs, f"output format {b.format} has {b.format.ndim} dimensions, "
                                          f"{st.lhs} has {len(st.lhs.indices)}"))
        b.shape = tuple(extents[i] for i in st.lhs.indices)
        dtypes = [tensors[a.tensor].dtype for a in st.rhs.accesses()] + [np.asarray(scalars[s]).dtype
                                                                         for s in st.rhs.scalars()]
        b.dtype = st.semiring.result_dtype(np.result_type(*dtypes) if dtypes else np.dtype(np.float64))


def _at(access, message: str) -> str:
    line, col = access.loc
    return f"line {line}, column {col}: {message}" if line else message


class Run:
    """A prepared program: its cache key, kernel module and the statements' plans."""

    def __init__(self, program, tensors, scalars, extents, target, schedule=None, device="cpu"):
        self.program, self.tensors, self.scalars = program, tensors, scalars
        self.extents, self.target, self.schedule, self.device = extents, target, schedule, device
        self.fields = self._fields()
        self.key = cache.kernel_key(self.fields)
        self.module = None

    @property
    def stable(self) -> bool:
        """Every user function the program calls has a stable key: the kernel may be cached on disk."""
        return all(f.stable for f in self.program.functions)

    def load(self):
        """``(module, key)``: the kernel module from the cache (``ustc.cache.load``), or compiled in
        memory when a user function has no stable key (:func:`load_local`)."""
        module, key = cache.load(self.fields, self.generate) if self.stable else load_local(self.key, self.generate)
        self.module = module
        return module, key
    def _fields(self) -> dict:
        operands = {}
        for name, b in self.tensors.items():
            if b.sparse:
                index = sorted({dtype_name(a.dtype) for a in b.value.raw_buffers.values()}) if b.value is not None else []
                operands[name] = {"format": b.format.signature, "dtype": dtype_name(b.dtype), "index": index}
            else:
                operands[name] = {"format": "ndarray", "ndim": len(b.shape), "dtype": dtype_name(b.dtype)}
        scalars = {s: type(v).__name__ for s, v in sorted(self.scalars.items())}
        # the compiler's own sources are in every key (ustc.cache's compiler fingerprint)
        fields = {"op": str(self.program), "operands": operands, "scalars": scalars, "target": self.target}
        extensions = levels.extension_sources(lv.type for b in self.tensors.values() if b.sparse
                                              for lv in b.format.levels)
        if extensions:  # level types registered from outside ustc: their source is part of the compiler
            fields["level_types"] = extensions
        if self.target == "cuda":
            from . import cuda_host

            fields.update(cuda_host.fields(self))
        return fields

    def generate(self) -> str:
        from ..codegen.compile import Operand, compile_program
        from ..codegen.emit_cpu import CpuEmitter, parallel, serial_name

        ops = {n: Operand(n, b.format, len(b.shape), str(b.dtype)) for n, b in self.tensors.items()}
        header = self.header()
        if self.target == "cuda":
            from . import cuda_host

            return cuda_host.generate(self, ops, header)
        module = compile_program(self.program, ops, header)
        functions = {fn.name: fn for fn in module.functions}
        plans = [plan.replace(serial=serial_name(plan.function)) if parallel(functions[plan.function]) else plan
                 for plan in module.meta["plan"]]
        return CpuEmitter().emit(module) + f"\n\n{plans_text(plans)}\n"

    def header(self) -> tuple[str, ...]:
        import numba

        lines = ["ustc generated kernel (do not edit; rebuilt when this header's key changes)",
                 f"op      : {self.program}"]
        for name, b in self.tensors.items():
            lines.append(f"{name:<8}: {b.format.signature if b.sparse else f'dense {len(b.shape)}-D array'} "
                         f"[{b.dtype}]")
        compiler = "numba njit" if self.target == "cpu" else f"numba-cuda, cc {self.fields.get('cc')}"
        lines += [f"target  : {self.target} ({compiler})", f"versions: ustc {__version__}, numba {numba.__version__}",
                  f"key     : {self.key}"]
        return tuple(lines)

    def module_source(self) -> str:
        module, key = self.load()  # a source twin's module runs: show this key's own file
        with open(cache.source_file(key) if self.stable else module.__file__, encoding="utf-8") as fh:
            return fh.read()

    def run(self) -> dict:
        module, key = self.load()
        results = {}
        for statement, plan in zip(self.program.statements, plans_of(module)):
            fn = cpu_function(module, plan, self.work()) if self.target == "cpu" else getattr(module, plan.function)
            call = fn if self.target == "cpu" else self._launcher(module, plan.function)
            first = not getattr(fn, "overloads", None)  # (Numba's .signatures builds a list)
            t0 = time.perf_counter()
            results[statement.lhs.tensor] = self._statement(statement, plan, call)
            if first:
                cache.note_first_call(key, fn, time.perf_counter() - t0)
        return results

    def work(self) -> int:
        """How much the kernel has to read: :func:`input_work` of the bound inputs."""
        return input_work(b.value for name, b in self.tensors.items()
                          if b.value is not None and name not in self.program.outputs)

    def _launcher(self, module, function: str):
        """The launch wrapper of the CUDA kernel ``function`` of ``module``, bound to the operands' stream."""
        from . import cuda_host

        return cuda_host.launcher(module, function, {n: b.value for n, b in self.tensors.items()})

    # -- one statement --------------------------------------------------------------------
    def _statement(self, statement: nt.Statement, plan: StatementPlan, fn):
        views = {name: b.value for name, b in self.tensors.items()}
        for alias, original in plan.alias:
            views[alias] = views[original]
        for name, fmt in plan.convert:
            views[name] = views[name].convert(fmt)
        out = self.tensors[statement.lhs.tensor]
        if plan.writer:
            return self._written(statement, fn, plan, views, out)
        if plan.sparse_output:
            return self._sparse(statement, plan, fn, views, out)
        target = out.value
        reads_self = any(a.tensor == out.name for a in statement.rhs.accesses())
        if not statement.accumulate:
            fill = fill_value(statement, out.dtype)
            target = np.full_like(out.value, fill) if reads_self else out.value
            if not reads_self and not plan.overwrites:  # else the kernel stores every element
                target.fill(fill)
        views[out.name] = target
        fn(*self._arguments(plan, views, {}))
        self.epilog(plan, target)
        if target is not out.value:
            out.value[...] = target
        return out.value

    def epilog(self, plan: StatementPlan, array) -> None:
        """Run the plan's epilog pass (``<kernel>_epilog``) over a dense output, when the kernel
        did not fuse it; nothing otherwise."""
        name = plan.epilog
        if name in (None, "fused", "host"):
            return
        contiguous = bool(array.flags.c_contiguous)
        flat = array.reshape(-1) if contiguous else array.ravel()
        if self.target == "cpu":
            from ..codegen.emit_cpu import serial_name

            fn = _pick(self.module, name, serial_name(name), flat.size)
        else:
            fn = self._launcher(self.module, name)
        if flat.size:
            fn(flat)
        if not contiguous:
            array[...] = flat.reshape(array.shape)

    def _sparse(self, statement, plan, fn, views, out):
        rows = plan.rows
        offsets = np.zeros(self.extents[rows] + 1 if rows else 1, np.int64)
        coords, values = self._entries(plan, fn, views, out, offsets,
                                       self._append_capacity(statement, plan, views, fn))
        old = out.value
        if statement.accumulate and isinstance(old, Tensor):
            old_coords, old_values = old.entries()
            coords = [np.concatenate([a, b]) for a, b in zip(old_coords, coords)]
            values = np.concatenate([old_values, values])
        sr = statement.semiring
        if not sr.is_plus_times or statement.epilog is not None:  # fold duplicates here, then the epilog
            coords, values = combine(coords, values, sr)
            if statement.epilog is not None:
                user_functions.apply_inplace(statement.epilog, values)
            result = assemble(coords, values, out.shape, out.format) if sr.is_plus_times else \
                structural(coords, values, out.shape, out.format)
            return self._deliver(out, result)
        starts = None
        if rows and not (statement.accumulate and isinstance(old, Tensor)):
            starts = (statement.lhs.indices.index(rows), offsets)
        return self._deliver(out, assemble(coords, values, out.shape, out.format, starts))

    def _deliver(self, out, result: Tensor) -> Tensor:
        """``result`` on the operands' device; a tensor the caller bound as the output takes its
        storage (the object the caller holds is the result)."""
        if self.device == "cuda":  # pragma: no cover - needs a GPU
            from .cuda_host import place

            result = place(result, self.device)
        old = out.value
        if isinstance(old, Tensor):
            result = old.assign(result)
        out.value = result
        return result

    def _written(self, statement, fn, plan, views, out):
        """A sparse output the kernel writes in its own format: count, size, (collect,) fill,
        finalize (``ops.written.run``); on the cuda target its buffers live where the operands do
        and a split kernel runs the chunks a GPU wants (``cuda_host.writer_place``)."""
        def call(state):
            return fn(*self._arguments(plan, views, state))

        if self.target == "cuda":
            from .cuda_host import writer_place

            place = writer_place(self.device, self.extents.get(plan.order[0], 1) if plan.order else 1)
            return self._deliver(out, written.run(out.format, out.shape, out.dtype, plan, call, place))
        return self._deliver(out, written.run(out.format, out.shape, out.dtype, plan, call))

    def _entries(self, plan, fn, views, out, offsets, capacity):
        """The output's coordinates and values: one appending pass into arrays of ``capacity``
        (when not None and enough), else count-then-fill; trimmed, and copied out when less
        than half the arrays is used. Row plans leave the row offsets in ``offsets``."""
        from ..codegen.lower import APPEND, COUNT, FILL

        rows = plan.rows
        # coordinates in the narrowest default index dtype, so assembly need not cast them
        dtypes = [index_dtype(0, 0, max(n - 1, 0), "crd") for n in out.shape]
        threads = 1 if getattr(fn, "__name__", None) == plan.serial else _threads()  # the serial twin: one chunk

        def run(mode: int, size: int):
            """One kernel call; returns its arrays and how many entries it counted."""
            filled = {"crd": [np.empty(size, d) for d in dtypes], "vals": np.empty(size, out.dtype),
                      "emit": mode, "offsets": offsets, "threads": threads}
            count = fn(*self._arguments(plan, views, filled))
            if rows:
                if mode == COUNT:  # row sizes -> row offsets, for the parallel filling pass
                    np.cumsum(offsets, out=offsets)
                elif mode == APPEND:  # rows stored where they end; rows past a tightened loop 0
                    np.maximum.accumulate(offsets, out=offsets)
                count = offsets[-1]
            return filled, int(count)

        filled, count = run(APPEND if rows else FILL, capacity) if capacity is not None else (None, None)
        if count is None or count > capacity:  # no capacity, or the kernel counted past it
            offsets[:] = 0
            _, count = run(COUNT, 0)
            filled, capacity = run(FILL, count)[0], count
        keep = (lambda a: a[:count].copy()) if count < capacity // 2 else (lambda a: a[:count])
        return [keep(c) for c in filled["crd"]], keep(filled["vals"])

    def _append_capacity(self, statement, plan, views, fn) -> int | None:
        """The capacity for one appending pass, or None for count-then-fill: a host kernel that
        runs serially (no row-parallel plan, or the serial twin) and an output bound, from the
        operands the kernel reads (``views``: converted ones included), no larger than the
        inputs (a union with a dense operand would allocate the dense size)."""
        if self.target != "cpu" or (plan.rows and getattr(fn, "__name__", None) != plan.serial):
            return None
        operands = dict(views)
        for alias, original in plan.alias:  # an operand read twice: its larger copy
            if isinstance(views.get(alias), Tensor) and views[alias].nse > getattr(operands[original], "nse", -1):
                operands[original] = views[alias]
        bound = output_bound(statement, operands, self.extents)
        return bound if bound is not None and bound <= self.work() + 1024 else None

    def _arguments(self, plan: StatementPlan, views: dict, out: dict) -> list:
        flat = {}
        args = []
        for role in plan.params:
            kind = role.kind
            if kind is Kind.EMIT:
                args.append(out["emit"])
            elif kind is Kind.OUT_CRD:
                args.append(out["crd"][role.dim])
            elif kind is Kind.OUT_VALS:
                args.append(out["vals"])
            elif kind is Kind.OUT_OFFSETS:
                args.append(out["offsets"])
            elif kind is Kind.OUT_LEVEL:
                args.append(out["levels"][(role.level, role.buffer)])
            elif kind is Kind.OUT_COUNTS:
                args.append(out["counts"])
            elif kind is Kind.OUT_SIZE:
                args.append(out["layout"].level_shape[role.level])
            elif kind is Kind.OUT_LO:
                args.append(out["layout"].origins[role.level])
            elif kind is Kind.OUT_WORK:
                args.append(out["work"][role.level])
            elif kind is Kind.ARRAY:
                a = views[role.tensor]
                args.append(a.reshape(1) if a.ndim == 0 else a)
            elif kind is Kind.EXTENT:
                args.append(self.extents[role.index])
            elif kind is Kind.SCALAR:
                args.append(self.scalars[role.name])
            elif kind is Kind.THREADS:
                args.append(out.get("threads") or _threads())
            elif kind in (Kind.POS, Kind.CRD, Kind.VALS, Kind.SIZE, Kind.LO):
                t = role.tensor
                if t not in flat:
                    flat[t] = _flat(views[t])
                buffers, values, level_shape, origins = flat[t]
                args.append(values if kind is Kind.VALS else level_shape[role.level] if kind is Kind.SIZE
                            else origins[role.level] if kind is Kind.LO else buffers[(role.level, kind.value)])
            else:
                raise KernelError(f"{plan.function}: the host binds no {role.describe()} here")
        return args


def _threads() -> int:
    """Numba's thread count now (kernels that split rows into chunks per thread take it; the
    serial twin is passed 1, so it runs one chunk and skips the balancing pre-pass)."""
    import numba

    return numba.get_num_threads()


def output_bound(statement: nt.Statement, operands: dict, extents: dict) -> int | None:
    """An upper bound on the entries of ``statement``'s output, or None when an index is
    summed over (a product of sparse operands can fill anything then).

    A stored operand bounds its term by its stored entries times the extents of the output
    indices it does not carry; a dense operand, a literal or a scalar by the output's size.
    ``+``/``-`` add bounds and ``*`` takes the smaller. Example: ``C[i, j] = A[i, j] + B[i, j]``
    gives ``nse(A) + nse(B)``; ``C[i, j] = A[i, j] * x[j]`` gives ``nse(A)``.
    """
    if statement.reduction_indices:
        return None
    out = set(statement.lhs.indices)
    full = math.prod(extents[i] for i in out)
    sr = statement.semiring

    def bound(e: nt.Expr) -> int:
        if isinstance(e, nt.Zero):
            return 0
        if isinstance(e, nt.Access):
            value = operands.get(e.tensor)
            if not isinstance(value, Tensor):
                return full
            missing = math.prod(extents[i] for i in out - set(e.indices))
            return min(full, value.nse * missing)
        if isinstance(e, (nt.Neg, nt.Apply)):
            return bound(e.children()[0])
        op = nt.operator_of(e)
        if op is not None and op == sr.mul:  # a structural product: within each factor's pattern
            return min(bound(c) for c in e.children())
        if op is not None and (op == sr.add or (sr.add == "plus" and op == "minus")):
            return min(full, sum(bound(c) for c in e.children()))
        return full

    return bound(statement.rhs)


def assemble(coords, values, shape, fmt: TensorFormat, rows: tuple[int, np.ndarray] | None = None) -> Tensor:
    """The output tensor from kernel-order coordinates (arrays the caller owns): a
    compressed-family target fed in its own order (CSR rows by rows) keeps the minor
    coordinates and values as they are and counts the major ones (O(n), no copy), or takes
    ``rows = (dimension, offsets)`` as its positions when the kernel wrote row offsets of that
    dimension; fed in the other order (CSR entries into CSC) it is one counting transpose;
    else the generic assembler sorts, sums duplicates and drops zeros."""
    from ..tensor import fastpaths, kernels

    fam = fastpaths.family(fmt)
    if fam is not None and fam.kind == "csr" and len(values):
        major, minor = coords[fam.major], coords[1 - fam.major]
        if kernels.strictly_increasing(major, minor):
            pos = rows[1] if rows is not None and rows[0] == fam.major else None
            fast = fastpaths.csr_from_sorted(major, minor, values, shape, fmt, pos)
            if fast is not None:
                return fast
        elif kernels.strictly_increasing(minor, major):  # walked in the other order (CSR into CSC)
            fast = fastpaths.csr_from_transposed(minor, major, values, shape, fmt)
            if fast is not None:
                return fast
    return Tensor.from_coo(coords, values, shape, fmt)


def fill_value(statement: nt.Statement, dtype):
    """What a dense output of ``=`` starts as: 0, or the statement's semiring ``𝟘``."""
    return 0 if statement.semiring.add == "plus" else statement.semiring.identity(dtype)


def combine(coords, values, semiring):
    """Entries with distinct coordinates, sorted: duplicates folded with the semiring's ⊕."""
    values = np.asarray(values)
    if not len(values):
        return list(coords), values
    order = np.lexsort(tuple(reversed([np.asarray(c) for c in coords]))) if coords else np.arange(len(values))
    coords = [np.asarray(c)[order] for c in coords]
    values = values[order]
    new = np.zeros(len(values), dtype=bool)
    new[0] = True
    for c in coords:
        new[1:] |= c[1:] != c[:-1]
    starts = np.flatnonzero(new)
    if len(starts) == len(values):
        return coords, values
    if semiring.ufunc is not None:
        folded = semiring.ufunc.reduceat(values, starts).astype(values.dtype, copy=False)
    else:
        folded = np.empty(len(starts), values.dtype)
        _fold_runs()(user_functions.resolve(semiring.add.key, "cpu"), values, starts, folded)
    return [c[starts] for c in coords], folded


_FOLD = []


def _fold_runs():
    if not _FOLD:
        import numba

        @numba.njit(nogil=True)
        def fold(f, values, starts, out):  # pragma: no cover - compiled
            n = values.shape[0]
            for r in range(starts.shape[0]):
                stop = starts[r + 1] if r + 1 < starts.shape[0] else n
                acc = values[starts[r]]
                for k in range(starts[r] + 1, stop):
                    acc = f(acc, values[k])
                out[r] = acc

        _FOLD.append(fold)
    return _FOLD[0]


def structural(coords, values, shape, fmt: TensorFormat) -> Tensor:
    """A tensor in ``fmt`` holding every entry given (distinct coordinates), zeros included: the
    output of a semiring other than plus-times, whose pattern is structural. The format is
    assembled from the entries' serial numbers (never zero, so none is dropped) and the values
    are put where the numbers landed; padding positions hold 0."""
    values = np.asarray(values)
    marks = assemble([np.asarray(c) for c in coords], np.arange(1, len(values) + 1, dtype=np.int64), shape, fmt)
    where = np.asarray(marks.raw_values)
    out = np.zeros(where.shape, dtype=values.dtype)
    hit = where > 0
    out[hit] = values[where[hit] - 1]
    return Tensor(marks.format, marks.shape, marks.raw_buffers, out)


_LOCAL_LOCK = threading.Lock()
_LOCAL_MODULES: dict = {}
_LOCAL_DIR: list = []


def load_local(key: str, generate):
    """``(module, key)`` for a program whose user functions have no stable key: generated once per
    process into a private temporary directory (removed at exit) and imported from there; never
    in ``ustc.cache``."""
    import importlib.util

    with _LOCAL_LOCK:
        module = _LOCAL_MODULES.get(key)
        if module is not None:
            return module, key
        if not _LOCAL_DIR:
            _LOCAL_DIR.append(Path(tempfile.mkdtemp(prefix="ustc-local-kernels-")))
            atexit.register(shutil.rmtree, _LOCAL_DIR[0], ignore_errors=True)
        name = f"ustc_local_kernel_{key[:24]}"
        path = _LOCAL_DIR[0] / f"{name}.py"
        path.write_text(generate(), encoding="utf-8")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(name, None)
            raise KernelError(f"generated kernel {path} failed to import: {type(exc).__name__}: {exc}") from exc
        _LOCAL_MODULES[key] = module
        return module, key


SERIAL_WORK = 300_000  # below this many input elements one thread beats a parallel launch (stencil SpMV: 0.19 vs 0.20 ms at 184K)


def input_work(values) -> int:
    """Stored entries (Tensors) plus dense elements (arrays) of ``values``."""
    return sum(v.nse if isinstance(v, Tensor) else int(np.size(v)) for v in values)


def cpu_function(module, plan: StatementPlan, work: int):
    """The kernel to call: the serial twin for small inputs (a parallel launch costs ~0.1 ms), else
    the plan's function."""
    return _pick(module, plan.function, plan.serial, work)


def _pick(module, function: str, serial: str | None, work: int):
    if work < SERIAL_WORK and serial:
        return getattr(module, serial)
    return getattr(module, function)


def _flat(t: Tensor):
    """Flat buffers (batch levels as dense), values, level extents and origins of ``t`` (a tensor
    on a device without batch levels as it is stored: its storage is flat already)."""
    if t.device != "cpu" and not t.format.batch_levels:
        return t.raw_buffers, t.raw_values, t.layout.level_shape, t.layout.origins
    buffers, values = t.flat_storage()
    return buffers, values, t.layout.level_shape, t.layout.origins
