"""The routes a planned :class:`ustc.Matmul` can take, in the order they are tried.

1. **registered**: a hand-written kernel for (op, format, target) from
   :mod:`ustc.kernels` (DIA and delta SpMV, CSR SpGEMM built in);
2. **library**: SciPy on the CPU where it beats generated code (SpGEMM on
   SciPy formats), cuSPARSE through CuPy on a GPU (CSR / CSC / COO SpMV, SpMM);
3. **generated**: the index-notation statement lowered for the operands'
   formats and compiled (``ustc.codegen``), cached on disk.

A planned CSR or BSR SpGEMM executed again on operands of unchanged structure runs only its
numeric pass over the output structure it kept (:class:`KeptStructureRoute`); a planned CSR SpMV
executed again reads a 16-bit copy of its column indices where they fit (:class:`NarrowColumnsRoute`).

A route for a dense result adds ``alpha * a @ b`` into an output that already
holds ``beta * c``; a route for a sparse result (both operands sparse) returns
``alpha * a @ b`` as a Tensor. ``prepare`` compiles or loads everything a
route needs; ``run`` only computes.

A :class:`Fusion` (a semiring, prologs on ``a`` and ``b``, an epilog) forces the
generated route: registered and library kernels compute plus-times products of
the stored values only.
"""

from __future__ import annotations

import functools
import time
import warnings
from dataclasses import dataclass

import numba
import numpy as np

from .. import cache
from ..errors import ConversionWarning, UnsupportedOperation, UstcError
from ..kernels import registry
from ..tensor import fastpaths, fastpaths_rows, safety
from ..tensor.tensor import Tensor
from ..codegen import functions
from ..codegen import notation as nt
from ..codegen.functions import Function
from ..codegen.plans import plans_of
from ..codegen.semiring import PLUS_TIMES, Semiring, as_semiring
from ..kernels._race import KernelRace
from . import runtime
from ._vector import csr_rows, csr_rows_at
from .operands import Problem, indices


@dataclass(frozen=True)
class Fusion:
    """What :meth:`ustc.Matmul.plan` fuses into the product: ``c := epilog(c ⊕ ⊕_k prolog_a(a) ⊗
    prolog_b(b))``. Prologs see stored values only; the epilog sees every element of a dense
    result (every entry of a sparse one). Hashable: part of the plan cache key."""

    semiring: Semiring = PLUS_TIMES
    prolog_a: Function | None = None
    prolog_b: Function | None = None
    epilog: Function | None = None
    swapped: bool = False   # the product is bound as b^T @ a^T (x @ B as B^T @ x): ⊗ takes (b, a)

    def swap(self) -> "Fusion":
        """The fusion of the product with its operands exchanged (prologs follow their operand)."""
        return Fusion(self.semiring, self.prolog_b, self.prolog_a, self.epilog, not self.swapped)

    @property
    def active(self) -> bool:
        return not self.semiring.is_plus_times or any(f is not None for f in (self.prolog_a, self.prolog_b,
                                                                                self.epilog))

    def describe(self) -> str:
        parts = [] if self.semiring.is_plus_times else [f"semiring {self.semiring.name}"]
        parts += [f"prolog {k} {f.name}" for k, f in (("a", self.prolog_a), ("b", self.prolog_b)) if f]
        parts += [f"epilog {self.epilog.name}"] if self.epilog else []
        return ", ".join(parts)


NO_FUSION = Fusion()


def fusion(prologs=None, epilog=None, semiring=None) -> Fusion:
    """A :class:`Fusion` from ``Matmul.plan``'s arguments (nvmath-python's names): ``prologs`` a
    dict ``{"a": f, "b": g}`` of one-argument functions, ``epilog`` one, ``semiring`` a name,
    :class:`ustc.Semiring` or dict. A prolog on ``c`` raises UnsupportedOperation."""
    prologs = dict(prologs or {})
    unknown = sorted(set(prologs) - {"a", "b", "c"})
    if unknown:
        raise UstcError(f"Matmul.plan(prologs=...): unknown operand {unknown[0]!r} (operands: a, b)")
    if prologs.get("c") is not None:
        raise UnsupportedOperation("Matmul.plan(prologs={'c': ...}): ustc applies prologs to a and b only; "
                                   "transform c before planning")
    made = {k: functions.function(prologs[k], 1, f"prolog of {k}") if prologs.get(k) is not None else None
            for k in ("a", "b")}
    post = functions.function(epilog, 1, "epilog") if epilog is not None else None
    return Fusion(as_semiring(semiring), made["a"], made["b"], post)


def op_name(p: Problem) -> str | None:
    """'spmv' | 'spmm' | 'spgemm' for a sparse 2-D a (possibly after rewriting), else None."""
    if not p.a.sparse or p.a.ndim != 2:
        return None
    if p.b.sparse:
        return "spgemm" if p.b.ndim == 2 else None
    return {1: "spmv", 2: "spmm"}.get(p.b.ndim)


class Route:
    kind = "route"
    overwrites = False  # run() stores every output element: the caller need not zero-fill it

    def prepare(self, a, b, out, alpha) -> None:
        """Compile or load what ``run`` needs (no computation on the operands' values)."""

    def run(self, a, b, out, alpha):
        raise NotImplementedError

    def bind_call(self, a, b, out, alpha):
        """``f(b2, out2, add)`` computing ``out2 := alpha * a @ b2 (+ add)`` (``add``: None or an array of
        ``out``'s layout) for arrays of ``b``'s and ``out``'s layout given at each call (``Matmul.bind_call``
        checks them), prepared now; None where this route keeps arguments bound to one ``b`` / ``out``."""
        return None

    def bind_address(self, a, b, out, alpha):
        """:meth:`bind_call`'s ``f(address, out2, add)`` reading ``b`` from a host address instead (C-contiguous,
        ``b``'s shape and dtype), or None where this route has no such kernel."""
        return None

    def unbind(self) -> None:
        """Forget arguments prepared for particular operands (the plan itself stays)."""

    def release(self) -> None:
        """Drop references to operands and buffers."""
        self.unbind()


class RegisteredRoute(Route):
    kind = "registered kernel"

    def __init__(self, entry: registry.Registered, op: str, out_format, overwrite: bool = False):
        """``overwrite``: the product has no ``c``, so a kernel with an ``overwrite`` twin (which
        stores every element of ``out``) runs that one and the caller skips the zero-fill."""
        self.entry, self.op, self.out_format = entry, op, out_format
        twin = getattr(entry.fn, "overwrite", None) if overwrite and op != "spgemm" else None
        self.fn = twin or entry.fn
        self.overwrites = twin is not None
        self.info = f"registered kernel: {entry.name} ({op}, {entry.target})"

    def prepare(self, a, b, out, alpha) -> None:
        compile_ = getattr(self.fn, "compile", None)
        if compile_ is not None:
            compile_(a, b, out if out is not None else self.out_format, alpha)

    def run(self, a, b, out, alpha):
        if self.op == "spgemm":
            c = self.fn(a, b, self.out_format)
            return c if alpha == 1 else c * alpha
        self.fn(a, b, out, alpha)
        return out


class ViaCsrRoute(RegisteredRoute):
    """SpGEMM of formats no kernel or library takes: each execute converts the operands the
    registered CSR kernel does not take to CSR (O(nnz) each, and the operands' current values are what count) and
    runs the registered CSR kernel, whose output converts to the requested format."""

    def __init__(self, entry: registry.Registered, out_format, converted: list[str]):
        super().__init__(entry, "spgemm", out_format)
        self.info += f" after converting {' and '.join(converted)} to CSR at every execute"

    def run(self, a, b, out, alpha):
        from ..formats import CSR

        a, b = (x if self.entry.matches("spgemm", x.format, "cpu") else _csr_operand(x, CSR) for x in (a, b))
        return super().run(a, b, out, alpha)


def _csr_operand(x, csr):
    """``x`` in CSR for one execute: a temporary no user sees and no kernel writes, so a DCSR or COO
    operand's column coordinates and values are shared, not copied (``fastpaths_rows.to_csr``)."""
    safety.ensure_safe(x)
    shared = fastpaths_rows.to_csr(x, csr, share=True)
    return shared if shared is not None else x.convert(csr)


def _generated_spgemm(p: Problem, a, b, out_format) -> Route | None:
    """The generated SpGEMM on the CPU, numeric values only (bool and object products keep the
    other routes): for the operands' own formats when that kernel reduces each row in a workspace
    in parallel, or serially where the operands' conversion to CSR has no fast path, else through
    CSR (:class:`ViaRowsRoute`: CSR-family, DCSR, BSR and DIA operands convert in O(nnz) in parallel,
    ``fastpaths_rows``). DCSR went through CSR once its conversion took 3.9 ms instead of 74 ms
    (512,000-row stencil): A @ A in alternating rounds on a loaded machine, 0.99x the CSR time
    through CSR against 1.41x for the serial own kernel; COO 0.92x against 1.59x."""
    if p.target != "cpu" or not np.issubdtype(np.result_type(a.dtype, b.dtype), np.number):
        return None
    if out_format is not None and not all(lv.type.ordered for lv in out_format.levels):
        return None  # an unordered output: the registered kernel skips the row sort (the workspace sorts)
    route = GeneratedRoute(p, "cpu", out_format)
    workspace, rows, converts = route.facts(a, b)
    cheap = all(fastpaths.family(x.format) is not None or fastpaths_rows.source_kind(x.format, x.level_shape)
                for x in (a, b))  # CSR / COO family, DCSR, BSR, DIA: O(nnz) to CSR in parallel
    own = workspace and not converts  # a kernel that converts its operands walks no own format (DIA: to DCSR)
    return route if own and (rows or not cheap) else ViaRowsRoute(p, a, b, out_format)


def _registered_spgemm(p: Problem, a, b, out_format) -> Route | None:
    """The registered CSR kernel (``_spgemm.product``) for CSR x CSR into sorted CSR on the CPU above
    ``runtime.SERIAL_WORK`` (smaller products keep the generated serial twin), floating values
    (its ``supports``): where a sample of rows makes at most ``_spgemm.ONE_PASS_RATIO``
    multiply-adds per output entry it writes each row once into an upper bound and packs the
    rows, else a counting pass then a filling pass. It writes the output's columns and values
    only, where the generated kernel also writes a row coordinate per entry that assembly then
    checks (strictly increasing, no zeros) and drops, and spans each chunk's workspace over the
    columns its rows reach, not all of them. Side-114 stencil A @ A (36.5M entries), the whole
    product at every call (``ustc.matmul``), alternating rounds at load 10-12: CPU ms 509 vs the
    generated route's 928 on 1 thread, 699 vs 1213 on 2. Power-law 200,000-row A @ A (11.3M
    products, 10.2M entries), interleaved: one pass 0.82x the generated kernel's time on 2 threads
    (load 2.4) and single-threaded. Unlike the generated kernel it keeps an entry whose products
    cancel, stored as zero (SciPy drops it): its pattern is every column the products reach."""
    from ..formats import CSR
    from ..kernels._spgemm import one_pass
    from ..tensor.interop import plain_format

    if p.target != "cpu" or out_format is None or plain_format(out_format) != CSR \
            or not all(lv.type.ordered for lv in out_format.levels) \
            or runtime.input_work((a, b)) < runtime.SERIAL_WORK:   # small: the generated serial twin
        return None
    entry = registry.lookup("spgemm", a.format, "cpu", a, b)
    if entry is None or not entry.builtin or entry.name != "csr_spgemm" or not entry.matches("spgemm", b.format, "cpu"):
        return None
    apos, acrd = a.raw_buffers[(1, "pos")], a.raw_buffers[(1, "crd")]
    bpos, bcrd = b.raw_buffers[(1, "pos")], b.raw_buffers[(1, "crd")]
    route = RegisteredRoute(entry, "spgemm", out_format)
    # what product() will choose for these operands (it samples again at every execute)
    single = one_pass(apos, acrd, bpos, bcrd, b.shape[1], int(a.nse > 0 and b.nse > 0))
    route.info += ", one pass into row bounds" if single else ", a counting pass then a filling pass"
    return route


class ViaRowsRoute(Route):
    """SpGEMM through the generated row-parallel CSR kernel: each execute converts the operands
    that are not CSR (O(nnz) each, so their current values count; a DCSR or COO operand's column
    coordinates and values are shared with its CSR temporary, :func:`_csr_operand`), the kernel
    reduces every output row in a workspace in parallel, and its CSR result converts to the
    requested format (a DCSR or COO result takes the CSR's buffers: ``fastpaths_rows.from_csr``).
    Chosen where the operands' own kernel would write serially (DCSR, COO) or re-emit partial
    products (BSR, DIA). Above ``runtime.SERIAL_WORK`` the registered CSR kernel runs instead of
    the generated one (:func:`_registered_spgemm`, decided at prepare on the CSR temporaries)."""

    kind = "generated"

    def __init__(self, p: Problem, a, b, out_format):
        from ..formats import CSR

        self.p, self.csr, self.out_format = p, CSR, out_format
        self.generated = self.inner = GeneratedRoute(p, "cpu", CSR)
        converted = [f"{name} ({_fmt_name_text(x.format)})" for name, x in (("a", a), ("b", b)) if not self._is_csr(x)]
        if b is a and converted:
            converted = [f"a = b ({_fmt_name_text(a.format)}) once"]
        self._head = "generated row-parallel CSR SpGEMM" + (
            f" after converting {' and '.join(converted)} to CSR at every execute" if converted else "")
        self.info = self._head

    def _is_csr(self, x) -> bool:
        from ..tensor.interop import plain_format

        return plain_format(x.format) == self.csr

    def _rows(self, a, b):
        """Both operands in CSR; one operand passed twice (``A @ A``) is converted once."""
        ca = a if self._is_csr(a) else _csr_operand(a, self.csr)
        return ca, ca if b is a else (b if self._is_csr(b) else _csr_operand(b, self.csr))

    def prepare(self, a, b, out, alpha) -> None:
        ca, cb = self._rows(a, b)
        registered = _registered_spgemm(self.p, ca, cb, self.csr)
        self.inner = _keeps_structure(self.p, ca, cb, registered or self.generated)
        self.kind = self.inner.kind
        self.inner.prepare(ca, cb, None, alpha)
        head = self._head if registered is None else self._head.replace("generated row-parallel", "row-parallel", 1)
        self.info = f"{head}; {self.inner.info}"  # not appended: plan() may prepare again

    def run(self, a, b, out, alpha):
        c = self.inner.run(*self._rows(a, b), None, alpha)
        if self.out_format is None or c.format == self.out_format:
            return c
        shared = fastpaths_rows.from_csr(c, self.out_format)  # c is dropped: DCSR / COO take its buffers
        return shared if shared is not None else c.convert(self.out_format)

    def unbind(self) -> None:
        self.inner.unbind()

    def release(self) -> None:
        self.inner.release()


class KeptStructureRoute(Route):
    """SpGEMM that keeps its output structure once executed twice since it was bound (CSR x CSR ->
    CSR, BSR x BSR -> BSR): while the operands' structure stays what it was (compared at every
    execute with copies, ``kernels._spgemm_kept``), later executes run only the numeric pass over
    the kept columns (blocks) and read the operands' current values (changed in place or not).
    Anything else runs ``inner``. A one-shot call (unbound after one execute) never keeps
    anything. Holds about the output's column indices plus the operands' structure while bound.
    ``benchmarks/bench_peers.py --only spgemm`` (3 rounds, load 1.8-2.8), A @ A, ms: side-114
    stencil (36.5M entries) CSR 107, BSR(2, 2) 92, SciPy 174, MKL 354; power-law 200k CSR 38,
    BSR(2, 2) 157, MKL 101, SciPy 184 (every execute running the full product, as recorded
    before in docs/benchmarks.md: CSR 221 and 112, BSR(2, 2) 156 and 417). ``keep(a, b, c, threads)``
    returns the kept structure of the product ``c`` (None where it is not every entry the
    products reach); ``product(kept, a, b, format, dtype)`` the product over it."""

    KEEP_AFTER = 2   # executes since binding before the structure is kept (one-shot calls: never)

    def __init__(self, inner: Route, keep=None, product=None):
        from ..kernels import _spgemm_kept

        self.inner, self.kind, self.info = inner, inner.kind, inner.info
        self._keep, self._product = keep or _spgemm_kept.csr_keep, product or _spgemm_kept.csr_product
        self._kept, self._runs = None, 0

    def prepare(self, a, b, out, alpha) -> None:
        self.inner.prepare(a, b, out, alpha)
        self.kind = self.inner.kind
        self.info = (f"{self.inner.info}; executed again on operands of the same structure: the numeric pass over "
                     f"the kept output structure")

    def run(self, a, b, out, alpha):
        from ..kernels._spgemm_kept import structure

        kept = self._kept
        if kept is not None and kept[1] == alpha and kept[0].matches(*structure(a), *structure(b)):
            held, _, fmt, dtype = kept
            c = self._product(held, a, b, fmt, dtype)
            if alpha != 1:
                c.raw_values[...] *= alpha   # as the inner routes scale their result
            return c
        self._kept = None
        c = self.inner.run(a, b, out, alpha)
        self._runs += 1
        if self._runs >= self.KEEP_AFTER and set(c.raw_buffers) == {(1, "pos"), (1, "crd")}:
            import numba

            held = self._keep(a, b, c, numba.get_num_threads())
            self._kept = None if held is None else (held, alpha, c.format, c.dtype)
        return c

    def unbind(self) -> None:
        self._kept, self._runs = None, 0
        self.inner.unbind()

    def release(self) -> None:
        self._kept, self._runs = None, 0
        self.inner.release()


def _keeps_structure(p: Problem, a, b, route: Route | None) -> Route | None:
    """``route`` wrapped in :class:`KeptStructureRoute` for CSR x CSR on the CPU above
    ``runtime.SERIAL_WORK`` (smaller products keep the generated serial twin), numeric compiled
    value dtypes; else ``route``."""
    from ..formats import CSR
    from ..tensor.interop import plain_format

    if route is None or p.target != "cpu" or runtime.input_work((a, b)) < runtime.SERIAL_WORK \
            or any(plain_format(x.format) != CSR or x.device != "cpu" or not fastpaths.compiled_dtype(x.dtype)
                   for x in (a, b)) or not np.issubdtype(np.result_type(a.dtype, b.dtype), np.number):
        return route
    return KeptStructureRoute(route)


class NarrowColumnsRoute(Route):
    """CSR SpMV that keeps a narrower copy of the operand's structure once executed twice since it
    was bound, and from then on reads that copy instead of the operand's int32 / int64 indices:
    where every entry lies on one of at most 32 diagonals (a stencil, a band) and rows are sorted,
    the offsets and a bit mask per row (``kernels._diagonal_spmv``: the side-114 stencil moves
    107 MB instead of 153 MB), else the column indices in 16 bits (``kernels._narrow_spmv``: uint16
    columns up to 65,536 columns, else int16 offsets from the diagonal where every entry lies
    within 32,767 of it; 128 MB on the stencil). The copy (masks, or 2 bytes an entry plus row
    lengths or pointers) is
    made again when the operand's index buffers are other arrays, are given again through
    ``Matmul.reset_operands``, or differ in a sample of rows and entries compared at every
    execute; where the columns do not fit (a power-law graph) the operand's own int32 / int64
    indices are read, and where a few columns take most reads they race on the first calls
    (``kernels._race.KernelRace``) against a renumbered copy of the column indices over a copy of
    ``x`` whose most-read columns are gathered together at every execute (``kernels._hot_columns``);
    both in rows of masked 8-lane gathers on AVX-512 hosts (the lines of the values and indices
    prefetched into L2, and those of ``x`` where it exceeds L2: ``kernels._masked_spmv``), else
    the row loop vectorised with gathers of ``x``, which the generated scalar loop is not; before the second
    execute (one-shot calls) ``inner`` (the generated kernel) runs. Values and ``x`` are read as they
    are at every execute."""

    KEEP_AFTER = 2   # executes since binding before the copy is made (one-shot calls: never)

    def __init__(self, inner: Route, accumulate: bool):
        self.inner, self.kind, self.info = inner, inner.kind, inner.info
        self.accumulate = accumulate   # the product has a c: the caller fills beta * c first
        self._narrow, self._refused, self._runs = None, None, 0

    def prepare(self, a, b, out, alpha) -> None:
        self.inner.prepare(a, b, out, alpha)
        self.kind, self.overwrites = self.inner.kind, self.inner.overwrites
        self.info = (f"{self.inner.info}; executed again: a bit mask per row over the diagonals where every "
                     f"entry lies on one of at most 32, else column indices kept in 16 bits where they fit "
                     f"(absolute up to 65,536 columns, else from the diagonal), else the operand's own, raced "
                     f"against a copy renumbered over its most-read columns of x gathered together first where "
                     f"a few take most reads, in a kernel that gathers x in vectors, its streams prefetched "
                     f"ahead on AVX-512 hosts")

    def run(self, a, b, out, alpha):
        import numba

        from ..kernels._diagonal_spmv import Diagonals
        from ..kernels._hot_columns import HotColumns
        from ..kernels._narrow_spmv import NarrowColumns

        pos, crd = a.raw_buffers[(1, "pos")], a.raw_buffers[(1, "crd")]
        threads = numba.get_num_threads()
        narrow = self._narrow
        if narrow is not None and isinstance(b, np.ndarray) and isinstance(out, np.ndarray) \
                and narrow.matches(pos, crd, len(a.raw_values), threads):
            narrow.spmv(out, a.raw_values, b, alpha, self.accumulate)
            return out
        if narrow is not None:   # changed: made again only after KEEP_AFTER executes of what it is now
            self._narrow, self._runs = None, 0
        result = self.inner.run(a, b, out, alpha)
        self._runs += 1
        source = (id(pos), id(crd), threads)
        if self._runs >= self.KEEP_AFTER and self._refused != source:
            self._narrow = Diagonals.of(pos, crd, threads) or NarrowColumns.of(pos, crd, a.shape[1], threads) \
                or HotColumns.of(pos, crd, a.shape[1], threads) or NarrowColumns.own_indices(pos, crd, threads)
            self._refused = source if self._narrow is None else None
        return result

    def unbind(self) -> None:
        self._narrow, self._refused, self._runs = None, None, 0
        self.inner.unbind()

    def release(self) -> None:
        self._narrow, self._refused, self._runs = None, None, 0
        self.inner.release()


def _narrow_columns(p: Problem, a, b, route: Route) -> Route:
    """``route`` wrapped in :class:`NarrowColumnsRoute` for a CSR SpMV on the CPU above
    ``runtime.SERIAL_WORK`` with int32 / int64 column indices, numeric compiled dtypes and a dense
    NumPy x; else ``route``."""
    from ..formats import CSR
    from ..tensor.interop import plain_format

    if op_name(p) != "spmv" or p.target != "cpu" or a.device != "cpu" or plain_format(a.format) != CSR \
            or not isinstance(b, np.ndarray) or runtime.input_work((a, b)) < runtime.SERIAL_WORK \
            or a.raw_buffers[(1, "crd")].dtype.itemsize <= 2 \
            or not all(fastpaths.compiled_dtype(x.dtype) and np.issubdtype(x.dtype, np.number) for x in (a, b)):
        return route
    return NarrowColumnsRoute(route, accumulate=p.c is not None)


class DiaProductRoute(Route):
    """SpGEMM of two DIA matrices (DIAI, DIAJ) into DIA, diagonal by diagonal
    (``fastpaths_rows.dia_product``): C's offsets are sums of A's and B's, each pair of diagonals a
    streaming multiply-add over the rows they share, chunks of rows in parallel. No conversion:
    through CSR, DIAI A @ A on the 512,000-row stencil took 1.5x the CSR time, most of it
    writing the 12.7M-entry CSR product back into DIAI."""

    kind = "registered kernel"
    info = "built-in kernel: DIA product diagonal by diagonal (spgemm, cpu)"

    def __init__(self, out_format):
        self.out_format = out_format

    def run(self, a, b, out, alpha):
        from ..tensor.fastpaths_rows import dia_product

        c = dia_product(a, b, self.out_format)
        return c if alpha == 1 else c * alpha


def _dia_spgemm(p: Problem, a, b, out_format) -> Route | None:
    """:class:`DiaProductRoute` for DIA x DIA into a DIA format on the CPU (numeric values)."""
    kinds = {fastpaths_rows.source_kind(x.format, x.level_shape) for x in (a, b)}
    if p.target != "cpu" or out_format is None or not kinds <= {"diai", "diaj"} \
            or fastpaths_rows.source_kind(out_format, ()) not in ("diai", "diaj") \
            or not np.issubdtype(np.result_type(a.dtype, b.dtype), np.number) \
            or not all(fastpaths.compiled_dtype(x.dtype) for x in (a, b)):
        return None
    return DiaProductRoute(out_format)


class BsrProductRoute(Route):
    """SpGEMM of two BSR matrices into BSR without leaving blocks (``kernels._bsr_spgemm``): for
    each block row, a block slot per block column it reaches, each pair of blocks a small dense
    multiply-add, block rows in parallel in chunks of equal work. Through CSR, BSR(2, 2) A @ A on
    the side-114 stencil took 4x the CSR time (649 vs 161 ms: each execute converted the operands
    to CSR and the 37M-entry product back into blocks)."""

    kind = "registered kernel"

    def __init__(self, blocks: tuple[int, int, int], out_format):
        r, k, c = blocks
        self.out_format = out_format
        self.info = f"built-in kernel: BSR product block row by block row, {r}x{k} @ {k}x{c} blocks (spgemm, cpu)"

    def run(self, a, b, out, alpha):
        from ..kernels._bsr_spgemm import bsr_spgemm

        fmt = self.out_format
        widths = fmt is not None and (fmt.pos_width or fmt.crd_width)
        # sorted unique block columns satisfy any properties the output's levels promise
        c = bsr_spgemm(a, b, None if widths else fmt)
        if widths:
            c = c.convert(fmt)
        return c if alpha == 1 else c * alpha


def _bsr_spgemm(p: Problem, a, b, out_format) -> Route | None:
    """:class:`BsrProductRoute` for BSR(r, k) x BSR(k, c) on the CPU (numeric values) into
    BSR(r, c), or with no output format named; other outputs and block shapes whose inner blocks
    differ keep their routes."""
    from ..formats import BSR
    from ..tensor.interop import plain_format

    if p.target != "cpu" or any(fastpaths_rows.source_kind(x.format, x.level_shape) != "bsr" or x.device != "cpu"
                                or not fastpaths.compiled_dtype(x.dtype) for x in (a, b)) \
            or not np.issubdtype(np.result_type(a.dtype, b.dtype), np.number):
        return None
    (r, k), (k_b, c) = a.level_shape[2:], b.level_shape[2:]
    if k != k_b or (out_format is not None and plain_format(out_format) != plain_format(BSR(r, c))):
        return None
    route = BsrProductRoute((r, k, c), out_format)
    if runtime.input_work((a, b)) < runtime.SERIAL_WORK:
        return route
    from ..kernels._bsr_spgemm import bsr_keep, bsr_product

    return KeptStructureRoute(route, bsr_keep, bsr_product)


class CsrOperandRoute(Route):
    """A product with a dense result through the generated CSR kernel: each execute converts ``a``
    to CSR (in parallel, no sort: ``fastpaths_rows``; a COO's column coordinates and values are
    shared with the temporary) and runs the CSR kernel. Chosen for a BSR operand times a wide X,
    where its own kernel measured slower than conversion plus the CSR kernel (``_csr_spmm``)."""

    kind = "generated"

    def __init__(self, p: Problem, a):
        from ..formats import CSR

        self.csr = CSR
        self.inner = GeneratedRoute(p, "cpu", None)
        self._head = f"generated CSR kernel after converting a ({_fmt_name_text(a.format)}) to CSR at every execute"
        self.info = self._head

    def prepare(self, a, b, out, alpha) -> None:
        self.inner.prepare(_csr_operand(a, self.csr), b, out, alpha)
        self.overwrites = self.inner.overwrites
        self.info = f"{self._head}; {self.inner.info}"

    def run(self, a, b, out, alpha):
        return self.inner.run(_csr_operand(a, self.csr), b, out, alpha)

    def unbind(self) -> None:
        self.inner.unbind()

    def release(self) -> None:
        self.inner.release()


CSR_OPERAND_COLUMNS = 32  # columns of X from which a BSR SpMM converts its operand to CSR at every execute


def _csr_spmm(p: Problem, a, b, op) -> Route | None:
    """:class:`CsrOperandRoute` for SpMM on the CPU with a BSR ``a`` (numeric values) and an ``X`` of
    at least :data:`CSR_OPERAND_COLUMNS` columns: the conversion costs O(nnz) once, the product
    O(nnz x columns). On the 512,000-row stencil, BSR(2, 2), in alternating rounds beside the CSR
    kernel on a loaded machine: 64 columns, the own kernel 2.30x the CSR time, conversion plus
    the CSR kernel 1.28x; 16 columns, 1.52x against 1.85x (the own kernel stays). COO measured
    the same either way (1.07x to 1.51x, within the noise) and keeps its own kernel; DIAI's own
    kernel was 1.21x, conversion would add ~12 ms."""
    if op != "spmm" or p.target != "cpu" or not p.a.sparse or p.b.sparse or a.device != "cpu" \
            or not np.issubdtype(a.dtype, np.number) or getattr(b, "ndim", 0) != 2 \
            or b.shape[-1] < CSR_OPERAND_COLUMNS or fastpaths_rows.source_kind(a.format, a.level_shape) != "bsr":
        return None
    return CsrOperandRoute(p, a)


class KernelFirstRoute(Route):
    """A hand-written CPU kernel for the operands it takes, ``inner`` for any other ``b`` or ``out``
    (another dtype, not C-contiguous), prepared on that first use. ``kernel`` has ``run`` and
    ``compile(a, b, out, alpha, accumulate, launch)``; subclasses say which operands it takes
    (:meth:`takes`) and how it is launched (:meth:`launch`: Numba's thread count unless a subclass
    says otherwise, e.g. parallel or not)."""

    kind = "registered kernel"

    def __init__(self, kernel, inner: Route, accumulate: bool):
        self.kernel, self.inner, self.accumulate = kernel, inner, accumulate
        self.overwrites = not accumulate  # without c every element of out is stored
        self._inner_ready = False

    def takes(self, a, b) -> bool:
        raise NotImplementedError

    def launch(self, a, b):
        import numba

        return numba.get_num_threads()

    def _fits(self, a, b, out) -> bool:
        return isinstance(out, np.ndarray) and out.dtype == a.raw_values.dtype and out.flags.c_contiguous \
            and self.takes(a, b)

    def prepare(self, a, b, out, alpha) -> None:
        if out is not None and self._fits(a, b, out):
            self.kernel.compile(a, b, out, alpha, self.accumulate, self.launch(a, b))

    def bind_call(self, a, b, out, alpha):
        if not self._fits(a, b, out):
            return None
        self.kernel.compile(a, b, out, alpha, False, self.launch(a, b))  # accumulate is a run-time flag
        kernel, launch = self.kernel, self.launch

        def call(b2, out2, add) -> None:
            if add is not None:  # the bias in the kernel's row write: out2[i] = out2[i] + row sum
                np.copyto(out2, add)
            kernel.run(a, b2, out2, alpha, add is not None, launch(a, b2))
        return call

    def run(self, a, b, out, alpha):
        if self._fits(a, b, out):
            self.kernel.run(a, b, out, alpha, self.accumulate, self.launch(a, b))
            return out
        if not self._inner_ready:
            self.inner.prepare(a, b, out, alpha)
            self._inner_ready = True
        if self.overwrites and not self.inner.overwrites:
            out[...] = 0
        return self.inner.run(a, b, out, alpha)

    def unbind(self) -> None:
        self.inner.unbind()

    def release(self) -> None:
        self.inner.release()
        self._inner_ready = False


class LinearCsrRoute(KernelFirstRoute):
    """CSR SpMV / SpMM on the CPU by ``kernels._linear_csr`` (a row's sum vectorised with gathers of
    ``x``; a row's entries eight at a time, each pass one loop over the batch): chosen by
    :func:`_linear_csr` for the products of a pruned ``nn.Linear``; ``inner`` is the generated kernel."""

    def __init__(self, p: Problem, op: str):
        from ..kernels._linear_csr import LinearCsr

        super().__init__(LinearCsr(), GeneratedRoute(p, "cpu", None), p.c is not None)
        self.op = op
        self.info = (f"registered kernel: linear_csr_{op} (cpu; "
                     + ("a row's sum vectorised with gathers of x)" if op == "spmv" else
                        "a row's entries 8 at a time, each pass vectorised over the batch)"))

    def takes(self, a, b) -> bool:
        from ..kernels._linear_csr import accepts

        return accepts(a.raw_buffers[(1, "pos")], a.raw_buffers[(1, "crd")], a.raw_values, b)


def _linear_csr(p: Problem, a, b, op) -> Route | None:
    """:class:`LinearCsrRoute` for a CSR ``a`` (any index widths; SpMV only with columns in 16 bits
    or fewer: wider ones take :class:`NarrowColumnsRoute`) times a dense NumPy ``b`` on the CPU,
    float32 or float64 values and ``b`` of one dtype, at least ``runtime.SERIAL_WORK`` input
    elements (smaller products keep the generated serial twin). 2048 x 2048 float32 weights,
    uint16 columns, one thread (``kernels._linear_csr``): SpMV 0.52x the generated kernel's
    CPU time at 90% zeros, 0.50x at 70%; SpMM at batch 128 0.6-0.7x."""
    from ..formats import CSR
    from ..kernels._linear_csr import accepts
    from ..tensor.interop import plain_format

    if op not in ("spmv", "spmm") or p.target != "cpu" or a.device != "cpu" or plain_format(a.format) != CSR \
            or runtime.input_work((a, b)) < runtime.SERIAL_WORK:
        return None
    crd = a.raw_buffers[(1, "crd")]
    if (op == "spmv" and crd.dtype.itemsize > 2) or not accepts(a.raw_buffers[(1, "pos")], crd, a.raw_values, b):
        return None
    return LinearCsrRoute(p, op)


class SerialCsrRoute(Route):
    """A small CSR SpMV on one thread by ``ops._vector.csr_rows`` (the one-shot small SpMV's row loop:
    masked 8-lane steps or two interleaved sums, raced for the first six runs by
    :class:`ustc.kernels._race.KernelRace`): chosen by :func:`_serial_csr` below ``runtime.SERIAL_WORK``
    where :func:`_linear_csr` stops. It reads ``b`` and writes ``out`` as given, so :meth:`bind_call`
    runs it on the caller's arrays (a bias in the row write); ``inner`` (the generated kernel) takes any
    ``b`` or ``out`` it does not (another dtype or shape)."""

    kind = "registered kernel"
    overwrites = True

    def __init__(self, p: Problem):
        self.inner, self._inner_ready = GeneratedRoute(p, "cpu", None), False
        self.race = KernelRace()  # choice 0: csr_rows' masked steps (row_sum), 1: its two sums (pairs)
        self._ran = None  # (a, b, out, pos, crd, vals, zero): the operands run() last checked, a's buffers
        self.info = "registered kernel: serial_csr_spmv (cpu; one thread, csr_rows' row sums raced)"

    @staticmethod
    def _fits(a, b, out) -> bool:
        dtype = a.raw_values.dtype
        return b.__class__ is np.ndarray and out.__class__ is np.ndarray and b.ndim == 1 and out.ndim == 1 \
            and b.dtype == dtype and out.dtype == dtype and out.shape[0] == a.shape[0] and b.shape[0] == a.shape[1]

    @staticmethod
    def _operand(a) -> tuple:
        buffers = a.raw_buffers
        return buffers[(1, "pos")], buffers[(1, "crd")], a.raw_values, a.raw_values.dtype.type(0)

    def prepare(self, a, b, out, alpha) -> None:
        """Compiles (or loads) ``csr_rows`` for these operands, with and without a bias; at plan time
        (``out`` None) for the planned output, a C-contiguous vector of the values' dtype."""
        if not self._fits(a, b, np.empty(a.shape[0], a.raw_values.dtype) if out is None else out):
            return
        vector = numba.types.Array(numba.from_dtype(a.raw_values.dtype), 1, "C")
        out_kind = vector if out is None else numba.typeof(out)
        kinds = [numba.typeof(v) for v in self._operand(a)[:3] + (b,)] + [out_kind] + [numba.typeof(0)] * 2
        kinds += [numba.none, numba.typeof(a.raw_values.dtype.type(0)), numba.boolean]
        for add in (numba.none, out_kind):  # without and with a bias (bind_call)
            csr_rows.compile(tuple(kinds + [add]))

    def _rows(self, pos, crd, vals, b, out, zero, add) -> None:
        winner = self.race.winner
        if winner is None:
            self.race.timed(self._raced, pos, crd, vals, b, out, zero, add)
        else:
            csr_rows(pos, crd, vals, b, out, 0, out.shape[0], None, zero, winner == 1, add)

    @staticmethod
    def _raced(choice: int, pos, crd, vals, b, out, zero, add) -> None:
        csr_rows(pos, crd, vals, b, out, 0, out.shape[0], None, zero, choice == 1, add)

    def run(self, a, b, out, alpha):
        ran = self._ran
        if ran is None or ran[0] is not a or ran[1] is not b or ran[2] is not out:
            if not self._fits(a, b, out):
                return self._run_inner(a, b, out, alpha)
            self._ran = ran = (a, b, out) + self._operand(a)
        self._rows(ran[3], ran[4], ran[5], b, out, ran[6], None)
        return out

    def _run_inner(self, a, b, out, alpha):
        if not self._inner_ready:
            self.inner.prepare(a, b, out, alpha)
            self._inner_ready = True
        if not self.inner.overwrites:
            out[...] = 0
        return self.inner.run(a, b, out, alpha)

    def bind_call(self, a, b, out, alpha):
        if not self._fits(a, b, out):
            return None
        self.prepare(a, b, out, alpha)
        (pos, crd, vals, zero), rows = self._operand(a), self._rows

        def call(b2, out2, add) -> None:
            rows(pos, crd, vals, b2, out2, zero, add)
        return call

    def bind_address(self, a, b, out, alpha):
        """The kernel reading ``b`` at an address, its row sums raced now (on zeros of ``b``'s layout) so
        that the call is ``csr_rows_at`` itself with the winner bound (no Python frame of its own)."""
        if not (self._fits(a, b, out) and b.flags.c_contiguous):
            return None
        pos, crd, vals, _ = self._operand(a)
        kinds = [numba.typeof(v) for v in (pos, crd, vals, b.shape[0])] + [numba.boolean, numba.typeof(0)]
        for add in (numba.none, numba.typeof(out)):  # without and with a bias
            csr_rows_at.compile(tuple(kinds + [numba.typeof(out), add]))
        scratch, result = np.zeros_like(b), np.empty_like(out)
        while self.race.winner is None:
            self.race.timed(_rows_at, pos, crd, vals, b.shape[0], scratch.ctypes.data, result, None)
        return functools.partial(csr_rows_at, pos, crd, vals, b.shape[0], self.race.winner == 1)

    def unbind(self) -> None:
        self._ran = None
        self.inner.unbind()

    def release(self) -> None:
        self.unbind()
        self.inner.release()
        self._inner_ready = False


def _rows_at(choice: int, pos, crd, vals, columns, address, out, add) -> None:
    csr_rows_at(pos, crd, vals, columns, choice == 1, address, out, add)


def _serial_csr(p: Problem, a, b, op) -> Route | None:
    """:class:`SerialCsrRoute` for a CSR SpMV below ``runtime.SERIAL_WORK`` input elements on the CPU
    (where :func:`_linear_csr` stops) with column indices in 16 bits or fewer (a pruned ``nn.Linear``
    weight's, ``ustc.torch.reformat``'s default; wider ones keep the generated serial twin), values
    and ``b`` of one float or complex dtype, no ``c`` and ``alpha`` 1. 512 x 512 float32 at 90% zeros,
    uint16 columns, thread CPU time, 21 alternating rounds at load ~1.5: csr_rows' two sums 9.0 µs
    against the generated serial twin's 10.7 (its masked steps 14.0: the race keeps the faster)."""
    from ..formats import CSR
    from ..tensor.interop import plain_format

    if op != "spmv" or p.target != "cpu" or a.device != "cpu" or p.c is not None or p.alpha != "one" \
            or plain_format(a.format) != CSR or runtime.input_work((a, b)) >= runtime.SERIAL_WORK:
        return None
    buffers = a.raw_buffers
    if set(buffers) != {(1, "pos"), (1, "crd")} or buffers[(1, "crd")].dtype.kind not in "iu" \
            or buffers[(1, "crd")].dtype.itemsize > 2 or buffers[(1, "pos")].dtype.kind not in "iu" \
            or a.raw_values.dtype not in _SERIAL_CSR_DTYPES or not isinstance(b, np.ndarray) or b.ndim != 1 \
            or b.dtype != a.raw_values.dtype:
        return None
    return SerialCsrRoute(p)


_SERIAL_CSR_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


class RowSpmmRoute(KernelFirstRoute):
    """SpMM on the CPU for a DCSR, row-sorted COO or BSR(2, 2) ``a`` by ``kernels._spmm_rows`` (the CSR
    route's kernel over DCSR's stored rows or COO's row runs found at plan time; BSR(2, 2): two output
    rows a block row, register blocked): chosen by :func:`_row_spmm`; ``inner`` is the generated
    kernel, for a ``b`` or ``out`` it does not take or rows out of order."""

    def __init__(self, p: Problem, kind: str):
        from ..kernels._spmm_rows import RowSpmm

        super().__init__(RowSpmm(kind), GeneratedRoute(p, "cpu", None), p.c is not None)
        self.info = f"registered kernel: {kind}_spmm (cpu; " + (
            "two output rows a block row, four blocks a pass over the batch)" if kind == "bsr22" else
            "a row's entries 8 at a time, each pass vectorised over the batch)")

    def takes(self, a, b) -> bool:
        return self.kernel.takes(a, b, self.launch(a, b))

    def release(self) -> None:
        super().release()
        self.kernel.forget()


def _row_spmm(p: Problem, a, b, op) -> Route | None:
    """:class:`RowSpmmRoute` for SpMM on the CPU with a DCSR, COO or BSR(2, 2) ``a`` (blocks tiling its
    shape) of float32 / float64 values times a C-contiguous NumPy ``b`` of their dtype, at least
    ``runtime.SERIAL_WORK`` input elements. Stencil of side 80 (512,000 rows) times 64 float64
    columns: see ``kernels._spmm_rows``."""
    from ..formats import BSR, COO, DCSR
    from ..kernels._spmm_rows import accepts
    from ..tensor.interop import plain_format

    if op != "spmm" or p.target != "cpu" or a.device != "cpu" or not accepts(a.raw_values, b) \
            or runtime.input_work((a, b)) < runtime.SERIAL_WORK:
        return None
    fmt = plain_format(a.format)
    kind = {plain_format(f): k for f, k in ((DCSR, "dcsr"), (COO, "coo"), (BSR(2, 2), "bsr22"))}.get(fmt)
    if kind == "bsr22" and tuple(a.shape) != (2 * a.level_shape[0], 2 * a.level_shape[1]):
        return None
    return None if kind is None else RowSpmmRoute(p, kind)


class LinearNmRoute(KernelFirstRoute):
    """n:m structured SpMV (``m`` up to 4) or SpMM on the CPU: SpMV by ``kernels._linear_nm`` (``x`` spread
    into ``m`` rows of one slot each, a row's sum a select among ``m`` contiguous loads instead of a gather
    per slot), SpMM by ``kernels._structured_tile`` (a tile of the result in vector registers across a
    block of slots). Chosen by :func:`_linear_nm` in place of the built-in ``structured_spmv`` /
    ``structured_spmm`` (``inner``)."""

    def __init__(self, inner: RegisteredRoute, nm: tuple[int, int], accumulate: bool, op: str = "spmv"):
        if op == "spmv":
            from ..kernels._linear_nm import NmSelect as kernel
        else:
            from ..kernels._structured_tile import NmTile as kernel

        super().__init__(kernel(*nm), inner, accumulate)
        self.op = op
        self.info = f"registered kernel: linear_nm_spmv ({nm[0]}:{nm[1]}, cpu; x spread by in-group column, no gathers)" \
            if op == "spmv" else f"registered kernel: nm_tile_spmm ({nm[0]}:{nm[1]}, cpu; a tile of y in vector registers)"

    def takes(self, a, b) -> bool:
        if self.op == "spmv":
            from ..kernels._linear_nm import accepts
        else:
            from ..kernels._structured_tile import accepts

        return accepts(self.kernel.n, self.kernel.m, a, b) and (self.op == "spmv" or _parallel(a, b))

    def launch(self, a, b) -> bool:
        return _parallel(a, b)


def _parallel(a, b) -> bool:
    return runtime.input_work((a, b)) >= runtime.SERIAL_WORK


def _linear_nm(p: Problem, a, b, op, inner: RegisteredRoute) -> Route | None:
    """:class:`LinearNmRoute` where the built-in ``structured_spmv`` / ``structured_spmm`` would run on
    the CPU: an SpMV of a ``Structured(n, m)`` ``a`` with ``m`` <= 4, float32 / float64 values and ``b`` of
    their dtype (2048 x 2048 at 2:4, float32, one thread: 0.63x that kernel's CPU time, 0.65x dense
    ``torch.mv``); an SpMM of float32 values by a float32 ``b`` whose batch is a multiple of 16, above
    the serial size (2048 x 2048 at 2:4, one thread, load 8.6: batch 16 2.97 ms against 5.74 for
    ``structured_spmm`` and 3.16 for dense ``F.linear``; batch 128 8.62 / 13.3 / 9.01)."""
    from ..kernels import _linear_nm as spmv, _structured_tile as spmm
    from ..kernels.builtin import _nm

    nm = _nm(a.format) if op in ("spmv", "spmm") and p.target == "cpu" and a.device == "cpu" else None
    if nm is None or not inner.entry.builtin:
        return None
    if op == "spmv":
        return LinearNmRoute(inner, nm, p.c is not None) if spmv.accepts(*nm, a, b) else None
    if not spmm.accepts(*nm, a, b) or not _parallel(a, b):
        return None
    return LinearNmRoute(inner, nm, p.c is not None, op)


def _via_csr(p: Problem, a, b, op, out_format) -> Route | None:
    """The CSR SpGEMM kernel through conversions, for sparse x sparse on the CPU."""
    from ..formats import CSR

    if op != "spgemm" or p.target != "cpu":
        return None
    entry = registry.lookup("spgemm", CSR, "cpu")
    if entry is None or not np.issubdtype(np.result_type(a.dtype, b.dtype), np.number):
        return None
    converted = [f"{name} ({_fmt_name_text(x.format)})" for name, x in (("a", a), ("b", b))
                 if not entry.matches("spgemm", x.format, "cpu")]
    return ViaCsrRoute(entry, out_format, converted)


class ScipyRoute(Route):
    """SciPy's compiled sparse products on the host (``a @ b`` of two SciPy sparse arrays)."""

    kind = "library"

    def __init__(self, out_format, reason: str):
        self.out_format = out_format
        self.info = f"library: SciPy sparse @ ({reason})"

    def run(self, a, b, out, alpha):
        from ..tensor.interop import to_scipy

        pa = to_scipy(a) if isinstance(a, Tensor) else a
        pb = to_scipy(b) if isinstance(b, Tensor) else b
        product = pa @ pb
        if out is None:
            c = Tensor.from_package(product).convert(self.out_format)
            return c if alpha == 1 else c * alpha
        out += alpha * np.asarray(product)
        return out


class CupyRoute(Route):
    """cuSPARSE SpMV / SpMM through ``cupyx.cusparse`` for CSR, CSC and COO on the GPU."""

    kind = "library"

    def __init__(self, op: str, fmt: str, index: str):
        self.op = op
        self.info = f"library: cuSPARSE {'SpMV' if op == 'spmv' else 'SpMM'} through CuPy ({fmt}, {index})"

    def run(self, a, b, out, alpha):
        from cupyx import cusparse

        fn = cusparse.spmv if self.op == "spmv" else cusparse.spmm
        return fn(a.to_package(), b, c=out, alpha=alpha, beta=1.0) if self.op == "spmm" \
            else fn(a.to_package(), b, y=out, alpha=alpha, beta=1.0)


class DenseRoute(Route):
    """Both operands dense: the array package's own ``matmul`` (BLAS / cuBLAS)."""

    kind = "library"
    info = "library: dense matmul (BLAS through the operands' package)"

    def run(self, a, b, out, alpha):
        product = a @ b
        out += product if alpha == 1 else alpha * product
        return out


class GeneratedRoute(Route):
    """A kernel generated from ``C[..] += alpha * A[..] * B[..]`` (or ``=`` into a sparse format);
    with a :class:`Fusion`, ``C[..] ⊕= f(A[..]) ⊗ g(B[..])`` and its epilog (for a sparse result
    with a dense ``c``, the caller folds the result into ``c`` and applies the epilog there)."""

    kind = "generated"

    def __init__(self, p: Problem, target: str, out_format, fused: Fusion = NO_FUSION):
        ai, bi, oi = indices(p.a, p.b)
        a, b = nt.Access("A", ai), nt.Access("B", bi)
        a = nt.Apply(fused.prolog_a, a) if fused.prolog_a is not None else a
        b = nt.Apply(fused.prolog_b, b) if fused.prolog_b is not None else b
        sr = fused.semiring
        rhs: nt.Expr = sr.multiply(b, a) if fused.swapped else sr.multiply(a, b)
        self.scaled = p.alpha != "one"
        if self.scaled:
            if not sr.is_plus_times:
                raise UnsupportedOperation(f"matmul: alpha scales plus-times products; the semiring {sr.name} "
                                           f"takes alpha = 1")
            rhs = nt.Mul(nt.Scalar("alpha"), rhs)
        self.sparse_out = out_format is not None
        # without c the kernel may overwrite the output (no zero-fill, no read-back) where it
        # stores every element once; with c it adds to beta * c
        accumulate = not self.sparse_out and p.c is not None
        epilog = None if self.sparse_out and p.c is not None else fused.epilog
        self.program = nt.Program((nt.Statement(nt.Access("C", oi), rhs, accumulate=accumulate, semiring=sr,
                                                epilog=epilog),))
        self.target, self.out_format = target, out_format
        self._run = self._module = self._call = self._plan = None
        self._args, self._bound, self._fn = None, None, None
        self.info = "generated"

    def prepare(self, a, b, out, alpha) -> None:
        bindings = {"A": a, "B": b, "C": self.out_format if self.sparse_out else out}
        if self.scaled:
            bindings["alpha"] = alpha
        self._run = runtime.prepare(self.program, bindings, self.target)
        module, key = self._run.load()
        self._module, self._plan = module, plans_of(module)[0]
        self.overwrites = self._plan.overwrites
        # on a GPU the module's launch wrapper picks the grid; on the CPU the njit function runs
        self._call = self._run._launcher(module, self._plan.function) if self.target == "cuda" else \
            getattr(module, self._plan.function)
        converts = ", ".join(f"{n} to {f}" for n, f in self._plan.convert)
        self.info = (f"generated: {self.target}, key {key[:12]}… ({self.program})"
                     + (f"; converts {converts} at every execute" if converts else "")
                     + ("" if self._run.stable else "; compiled in memory (a user function has no stable key)"))
        if not self.sparse_out and self.target == "cpu":
            self._compile(key, self._cpu_function(a, b), self._arguments(a, b, out, alpha))

    def facts(self, a, b) -> tuple[bool, bool, bool]:
        """``(workspace, rows, converts)``: whether the kernel for these operands writes each output
        entry once (a reduction into a sparse output through a workspace: ``codegen.workspace``),
        whether it builds the output's rows in parallel, and whether it converts an operand at
        every execute, as the compiler recorded them in the plan. Prepares the route (compiles or
        loads its kernel)."""
        with warnings.catch_warnings():  # a conversion this kernel would make is moot if it is not chosen
            warnings.simplefilter("ignore", ConversionWarning)
            self.prepare(a, b, None, 1)
        plan = self._plan
        return plan.workspace is not None, plan.rows is not None, bool(plan.convert)

    def _cpu_function(self, a, b):
        """The njit function these operands run: the serial twin when they are small."""
        return runtime.cpu_function(self._module, self._plan, runtime.input_work((a, b)))

    @staticmethod
    def _compile(key: str, fn, args) -> None:
        import numba

        if getattr(fn, "signatures", True):  # compiled already (or Numba's JIT is disabled)
            return
        t0 = time.perf_counter()
        fn.compile(tuple(numba.typeof(x) for x in args))
        cache.note_first_call(key, fn, time.perf_counter() - t0)

    def _arguments(self, a, b, out, alpha):
        bound = self._bound
        same = bound is not None and bound[0] is a and bound[1] is b and bound[2] is out and bound[3] == alpha
        if not same or self._plan.convert:
            views = {"A": a, "B": b, "C": out}
            for alias, original in self._plan.alias:
                views[alias] = views[original]
            for name, fmt in self._plan.convert:
                views[name] = views[name].convert(fmt)
            self._run.scalars = {"alpha": alpha} if self.scaled else {}
            self._args, self._bound = self._run._arguments(self._plan, views, {}), (a, b, out, alpha)
            # the kernel these operands take, chosen once per binding (not at every execute)
            self._fn = self._cpu_function(a, b) if self.target == "cpu" else self._call
        return self._args

    def bind_call(self, a, b, out, alpha):
        """The kernel's bound arguments with ``b`` and ``out`` replaced at each call, where each is one
        argument as it is (a CPU kernel of a dense result with no conversion, alias or epilog pass)."""
        if self.sparse_out or self.target != "cpu" or self._plan is None or self._plan.convert \
                or self._plan.alias or self._plan.epilog not in (None, "fused", "host"):
            return None
        args = list(self._arguments(a, b, out, alpha))
        at_b = [i for i, x in enumerate(args) if x is b]
        at_out = [i for i, x in enumerate(args) if x is out]
        if len(at_b) != 1 or len(at_out) != 1:
            return None
        fn, overwrites, i_b, i_out = self._fn, self.overwrites, at_b[0], at_out[0]

        def call(b2, out2, add) -> None:
            args[i_b], args[i_out] = b2, out2  # (the caller holds the plan's lock)
            if not overwrites:  # the kernel adds into out2
                if add is None:
                    out2.fill(0)
                else:
                    np.copyto(out2, add)
            fn(*args)
            if overwrites and add is not None:
                np.add(out2, add, out=out2)
        return call

    def run(self, a, b, out, alpha):
        if not self.sparse_out:
            args = self._arguments(a, b, out, alpha)
            self._fn(*args)
            self._run.epilog(self._plan, out)
            return out
        call = self._cpu_function(a, b) if self.target == "cpu" else self._call
        tensors = self._run.tensors
        tensors["A"].value, tensors["B"].value, tensors["C"].value = a, b, None
        self._run.scalars = {"alpha": alpha} if self.scaled else {}
        statement = self.program.statements[0]
        result = self._run._statement(statement, self._plan, call)
        tensors["C"].value = None
        return result

    def unbind(self) -> None:
        self._args = self._bound = self._fn = None
        if self._run is not None:
            for bound in self._run.tensors.values():
                bound.value = None

    def release(self) -> None:
        self.unbind()
        self._run = self._module = self._call = None


def choose(p: Problem, a, b, out_format, fused: Fusion = NO_FUSION) -> tuple[Route, str]:
    """The route for ``p`` and why it was chosen (``p.route`` forces one; a fusion forces the
    generated route)."""
    op = op_name(p)
    forced = p.route
    if fused.active:
        if forced not in (None, "generated"):
            raise UnsupportedOperation(f"matmul: route {forced!r} computes plus-times products of stored values; "
                                       f"{fused.describe()} needs the generated route")
        return GeneratedRoute(p, p.target, out_format, fused), \
            f"{fused.describe()}: only generated kernels fuse them (library and registered kernels are plus-times)"
    if not p.a.sparse and not p.b.sparse:
        return DenseRoute(), "both operands are dense"
    tried = []
    if forced is None and op == "spgemm":
        route = _dia_spgemm(p, a, b, out_format)
        if route is not None:
            return route, "DIA times DIA is DIA: the diagonals multiply pairwise, no conversion"
        route = _bsr_spgemm(p, a, b, out_format)
        if route is not None:
            return route, "BSR times BSR is BSR: the blocks multiply pairwise, no conversion"
        route = _keeps_structure(p, a, b, _registered_spgemm(p, a, b, out_format))
        if route is not None:
            return route, ("CSR x CSR above the serial size: the registered kernel writes columns and values only, "
                           "its workspaces spanning the columns each chunk reaches")
        route = _generated_spgemm(p, a, b, out_format)
        own = isinstance(route, GeneratedRoute)
        route = _keeps_structure(p, a, b, route) if own else route
        if route is not None:
            where = "in the operands' own formats" if own else \
                "in parallel (the operands' own kernel would write serially or re-emit partial products)"
            return route, f"each output row is reduced in a workspace and written once, {where}"
        tried.append("no generated workspace SpGEMM for these values or this output order")
    if forced is None and op == "spmm":
        route = _row_spmm(p, a, b, op)
        if route is not None:
            return route, "DCSR / row-sorted COO / BSR(2, 2) with float values above the serial size: the CSR kernel's row walk"
        route = _csr_spmm(p, a, b, op)
        if route is not None:
            return route, "converting a to CSR in parallel and the CSR kernel measured faster than a's own kernel"
    if forced in (None, "registered"):
        entry = registry.lookup(op, a.format, p.target, a, b) if op else None
        if entry is not None:
            route = RegisteredRoute(entry, op, out_format, overwrite=p.c is None)
            nm = _linear_nm(p, a, b, op, route) if forced is None else None
            if nm is not None:
                return nm, ("n:m SpMV with m <= 4: a select among m loads measured faster than the gathers of the built-in kernel"
                            if op == "spmv" else "n:m SpMM, float32, batch a multiple of 16: a register tile measured faster than the built-in kernel")
            return route, "a registered kernel matches (op, format, target)"
        tried.append(f"no registered kernel for {op or 'this product'} on {_fmt_name(p.a, a)} ({p.target})")
    if forced is None:
        route = _linear_csr(p, a, b, op)
        if route is not None:
            return route, "CSR with float values above the serial size: a kernel measured 2x the generated one"
        route = _serial_csr(p, a, b, op)
        if route is not None:
            return route, "a small CSR SpMV with narrow columns: one thread's row loop measured faster than the generated twin"
    if forced in (None, "library"):
        route = _library(p, a, b, op, out_format, default=forced is None)
        if route is not None:
            why = "forced" if forced else "the library kernel is faster than generated code here"
            return route, why
        tried.append(f"no library kernel {'is faster' if forced is None else 'handles this'}")
    if forced in (None, "registered"):
        route = _via_csr(p, a, b, op, out_format)
        if route is not None:
            return route, "; ".join(tried + ["converting to CSR costs O(nnz), far less than the product"])
    if forced in (None, "generated"):
        route = GeneratedRoute(p, p.target, out_format)
        return (route if forced else _narrow_columns(p, a, b, route)), "; ".join(tried) or "forced"
    raise UnsupportedOperation(f"matmul: route {forced!r} cannot run this product: {'; '.join(tried)}")


def _library(p: Problem, a, b, op, out_format, default: bool) -> Route | None:
    kinds = [_scipy_class(x) if s.sparse else "dense" for s, x in ((p.a, a), (p.b, b))]
    if p.target == "cpu":
        if None in kinds or p.a.ndim > 2 or p.b.ndim > 2:
            return None
        if op == "spgemm" or (not default and (p.a.sparse or p.b.sparse)):
            return ScipyRoute(out_format, " x ".join(kinds) + (f" -> {_fmt_name_text(out_format)}"
                                                               if out_format is not None else ""))
        return None
    narrow = {str(p.a.dtype), str(p.b.dtype)} & {"float16", "bfloat16"}   # CuPy's sparse matrices hold neither
    if op in ("spmv", "spmm") and kinds[0] in ("csr", "csc", "coo") and p.device == "cuda" and not narrow:
        return CupyRoute(op, kinds[0].upper(), "/".join(p.a.index))
    return None


def _scipy_class(t) -> str | None:
    """The SciPy class that can view ``t`` zero-copy (BSR only when the blocks tile the shape)."""
    from ..tensor.interop import _scipy_kind

    kind = _scipy_kind(t.format)
    if kind == "bsr" and any(n % block for n, block in zip(t.shape, t.layout.level_shape[2:])):
        return None
    return kind


def _fmt_name(s, x) -> str:
    return _fmt_name_text(x.format) if s.sparse else f"a dense {s.ndim}-D array"


@functools.lru_cache(maxsize=1024)      # formats are frozen and hashable
def _fmt_name_text(fmt) -> str:
    """The registry name of ``fmt`` when it is a named format (widths aside), else its signature."""
    from ..formats import NAMED
    from ..tensor.interop import plain_format

    plain = plain_format(fmt)
    for nf in NAMED:
        if plain_format(nf.format()) == plain:
            return nf.name if not nf.example else f"{nf.name}{nf.format().name[len(nf.name):]}"
    return str(fmt)
