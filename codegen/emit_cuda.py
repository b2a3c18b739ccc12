"""Numba CUDA emitter: the same loop IR as the CPU target → readable ``numba.cuda`` source.

A visitor over :mod:`codegen.loopir`; it never sees formats. Per loop-IR function it
writes a device kernel ``kernel_k`` (``@cuda.jit(cache=True)``, launch bounds from the
schedule: :attr:`~codegen.cuda_schedule.Schedule.max_registers`) and a host wrapper
``launch_kernel_k`` taking the CPU kernel's arguments (plus ``stream``), choosing the
grid and returning what the CPU kernel returns (the entry count of a serial
sparse-output pass). Which loop runs on which threads, and how, is decided by
:mod:`codegen.cuda_schedule` (:func:`~codegen.cuda_schedule.planned`); this module
only writes it down:

* thread_per_row: the spread loop as a grid-stride loop (a thread per row of CSR/CSF,
  per block row of BSR, per row of every diagonal of DIA, per nonzero chunk split at
  run borders of COO); ``cuda.atomic.add`` for its stores when iterations conflict;
* warp_per_row: ``width`` lanes stride through the row reduction, ``shfl_down_sync`` adds;
* merge_path: each thread searches its share of (row ends + entries) on the merge path,
  then walks it: whole rows store plainly, the two rows it may share add atomically;
* block_tile: ``width`` lanes stride through the shared dense loop;
* serial: one thread.

Folds other than ``+`` (semirings): registers and plain stores fold as on the CPU
(``acc = min(acc, v)``); the shuffles of warp_per_row combine with the fold; atomic
stores use ``cuda.atomic.min`` / ``max`` — the schedules only spread a loop over
conflicting stores when the fold has an atomic (``cuda_schedule.ATOMIC``). User
functions are bound at import as device functions (``numba.cuda.jit(device=True)``).

bfloat16 (``codegen.cuda_bfloat16``): the launch wrapper views bfloat16 arrays as their
``uint16`` bits; a widened load shifts them into a float32's upper half and a rounded
store keeps the float32's upper half rounded to nearest, ties to even, by integer
arithmetic. The two bit casts are libdevice's on a GPU and NumPy views in the simulator.
"""

from __future__ import annotations

import dataclasses

from ustc.errors import UnsupportedOperation

from . import loopir as ir
from .cuda_bfloat16 import ROUND, WIDEN, bfloat16_arrays
from .cuda_schedule import (ATOMIC, SCALAR_ROLES, WARP, Mapping, Schedule, choose_schedule, planned, substitute,
                            writes_chunks)
from .cuda_schedule import LOADS, LOADS_MODULE, readonly_arrays
from .cuda_vector import vectorised
from .emit_cpu import ATOM, RESOLVE, CpuEmitter, extern_lines, renames
from .names import FreshNames
from .roles import LEVEL_BUFFERS, Kind

FULL_MASK = "0xFFFFFFFF"
#: the merge path's variables, each the kernel's fresh name based on ``mp_<name>``
MERGE_NAMES = ("tid", "grid", "first", "rows", "base", "entries", "items", "share", "d0", "d1", "r0", "r1",
               "k0", "k1", "row", "lo", "hi", "mid")
ARITHMETIC = ("+", "-", "*", "//", "%", "&", ">>", "<<")
#: the bit casts bfloat16 kernels use (``codegen.cuda_bfloat16``): libdevice's on a GPU (one
#: move each), NumPy's views in the simulator, which runs kernels as Python
BIT_CASTS = ("if config.ENABLE_CUDASIM:  # the simulator runs kernels as Python: NumPy reinterprets the bits",
             "    def int_as_float(word):",
             '        """The float32 whose bits are the 32-bit integer `word`."""',
             "        return np.int64(word).astype(np.uint32).view(np.float32)",
             "",
             "    def float_as_int(value):",
             '        """The bits of the float32 `value`, as an int32."""',
             "        return np.float32(value).view(np.int32)",
             "else:",
             "    from numba.cuda.libdevice import float_as_int, int_as_float",
             "")
FLOAT32_EXPONENT = 0x7F800000   # a float32's bits above this (sign cleared) are a NaN


# -- the emitter ---------------------------------------------------------------------------

class CudaEmitter(CpuEmitter):
    """``emit(module, schedules)`` returns the module's source text."""

    target = "cuda"
    #: module-level names (imports, helpers) and the fixed names of the launch wrappers (their
    #: ``stream`` keyword, the grid size, the returned count): a user name spelled like one is
    #: renamed; the kernels' own variables (``lane``, ``mp_tid``, ...) are fresh names instead
    GLOBALS = frozenset({"np", "config", "cuda", "blocks_for", "bounds", RESOLVE, "stream", "blocks", "result",
                         "int_as_float", "float_as_int"})

    GLOBALS = GLOBALS | frozenset(LOADS)  # the load intrinsics (codegen.cuda_loads)

    def __init__(self, unsigned_index: bool = True):
        super().__init__(unsigned_index)
        self._atomic = False

    def emit(self, module: ir.Module, schedules: dict | None = None) -> str:
        lines = [f"# {line}" if line else "#" for line in module.header]
        lines += ["", "import numpy as np", "from numba import config, cuda",
                  f"from {LOADS_MODULE} import {', '.join(LOADS)}", "", "",
                  "def blocks_for(work, threads, limit):",
                  '    """Blocks for `work` grid-stride iterations: at least 1, at most `limit`."""',
                  "    return max(1, min(limit, (work + threads - 1) // threads))", "", "",
                  "def bounds(threads, blocks):",
                  '    """cuda.jit launch bounds: at most `threads` a block, registers left for `blocks` blocks',
                  "    a multiprocessor (none in the CUDA simulator, whose cuda.jit takes none).\"\"\"",
                  '    return {} if config.ENABLE_CUDASIM else {"launch_bounds": (threads, blocks)}', ""]
        if any(bfloat16_arrays(fn) for fn in module.functions):
            lines += ["", *BIT_CASTS]
        lines += extern_lines(module, "cuda")
        reserved = self.module_names(module)
        for fn in module.functions:
            schedule = (schedules or {}).get(fn.name) or choose_schedule(fn)
            mapping = renames(fn, reserved)
            if mapping:
                fn = ir.rename(fn, mapping)
                if schedule.loop in mapping:  # block_tile names the loop lanes share
                    schedule = dataclasses.replace(schedule, loop=mapping[schedule.loop])
            lines += ["", *self.kernel(fn, schedule), "", "", *self.launcher(fn, schedule), ""]
        return "\n".join(lines).rstrip() + "\n"

    def module_names(self, module: ir.Module) -> frozenset[str]:
        names = set(self.GLOBALS) | {e.name for e in module.externs}
        for fn in module.functions:
            names |= {fn.name, f"launch_{fn.name}"}
        return frozenset(names)

    def fresh(self, key, base: str) -> str:
        """A variable of the kernel being emitted, unique against every name it uses."""
        return self._names(("cuda", key), base)

    # -- device kernel ----------------------------------------------------------------------
    def kernel(self, fn: ir.Function, schedule: Schedule) -> list[str]:
        self.width = schedule.width
        self._index_arrays = {p.name for p in fn.params if p.role.kind in LEVEL_BUFFERS}
        self._readonly = readonly_arrays(fn) if schedule.readonly_loads else frozenset()
        self._names = FreshNames(ir.names_in(fn) | self.GLOBALS)
        m = planned(fn, schedule)
        params = [p.name for p in fn.params] + (["result"] if _returns(fn) else [])
        out = [f"# schedule: {schedule.describe()}",
               f"# promises: {promises(m, schedule, bool(self._readonly))}",
               f"@cuda.jit(cache=True, **bounds({schedule.threads}, {schedule.min_blocks}))",
               f"def {fn.name}({', '.join(params)}):"]
        if fn.doc:
            out.append(f'    """{fn.doc}"""')
        body: list[str] = []
        after = False
        for s in fn.body:
            if s is m.loop:
                body += self.spread(s, m, schedule)
                after = True
            else:
                self._atomic = after and m.atomic
                body += self.stmt(s, 1)
                self._atomic = False
        return out + (body or ["    pass"])

    def spread(self, s: ir.For, m: Mapping, schedule: Schedule) -> list[str]:
        if schedule.kind == "merge_path" and m.warp is not None:
            return self.merge_loop(s, m)
        if m.warp is not None:
            return self.warp_loop(s, m)
        if m.tile is not None:
            return self.tile_loop(s, m, schedule.vector)
        if m.vector is not None:  # the row loop's values a vector at a time (codegen.cuda_vector)
            s = vectorised(s, m.vector, schedule.vector, self.fresh)
        return self.grid_loop(s, m.atomic and not s.parallel)

    def grid_loop(self, s: ir.For, atomic: bool) -> list[str]:
        step = f"{s.step} * " if s.step != 1 else ""
        first = f"{step}cuda.grid(1)" if s.start == ir.Const(0) else f"{self.expr(s.start, 9)} + {step}cuda.grid(1)"
        head = f"    for {s.var} in range({first}, {self.expr(s.stop)}, {step}cuda.gridsize(1)):"
        note = "    # iterations may update the same output elements: atomic adds" if atomic else None
        self._atomic = atomic
        try:
            return ([note] if note else []) + [head] + self.nested(s.body, 1)
        finally:
            self._atomic = False

    def lane_rows(self, s: ir.For, note: str) -> tuple[list[str], str, int]:
        """The head shared by the laned schedules: ``width`` lanes per iteration of ``s``,
        ``32 / width`` iterations per warp, a grid-stride loop over warps. Returns the lines,
        the guard that the iteration exists (``""`` when every one does) and the body depth."""
        w, rows = self.width, WARP // self.width
        start, stop = ("" if s.start == ir.Const(0) else self.expr(s.start, 9) + " + "), self.expr(s.stop)
        out = [f"    {self.fresh('lane', 'lane')} = cuda.threadIdx.x % {w}  # {note}"]
        if rows == 1:
            out.append(f"    for {s.var} in range({start}cuda.grid(1) // 32, {stop}, cuda.gridsize(1) // 32):")
            return out, "", 2
        group, base = self.fresh("group", "group"), self.fresh(("base", s.var), f"{s.var}_base")
        out += [f"    {group} = cuda.threadIdx.x % 32 // {w}  # {rows} {s.var} per warp",
                f"    for {base} in range({start}cuda.grid(1) // 32 * {rows}, {stop}, "
                f"cuda.gridsize(1) // 32 * {rows}):",
                f"        {s.var} = {base} + {group}"]
        return out, f"{s.var} < {stop}", 2

    def warp_loop(self, s: ir.For, m: Mapping) -> list[str]:
        """``width`` lanes per iteration of ``s``; lanes stride through ``m.warp`` and shuffle-add."""
        w = self.width
        k = s.body.index(m.warp)
        pre, post = s.body[:k], s.body[k + 1:]
        init = [p for p in pre if isinstance(p, ir.Assign) and p.name == m.acc]
        pre = [p for p in pre if not any(p is q for q in init)]
        lane = ir.Var(self.fresh("lane", "lane"))
        inner = ir.For(m.warp.var, ir.add(m.warp.start, lane), m.warp.stop, m.warp.body, step=w)
        out, exists, depth = self.lane_rows(s, f"{w} lanes per {s.var}")
        out += self.block(init, depth)  # every lane reaches the shuffles, so sums start outside the guard
        if exists:
            out += [f"        if {exists}:"] + self.block([*pre, inner], depth + 1)
        else:
            out += self.block([*pre, inner], depth)
        offset = w // 2
        op = m.warp.body[-1].op
        while offset:
            shuffled = f"cuda.shfl_down_sync({FULL_MASK}, {m.acc}, {offset})"
            out.append(f"        {m.acc} += {shuffled}" if op == "+" else f"        {m.acc} = {op}({m.acc}, {shuffled})")
            offset //= 2
        guard = f"{lane.name} == 0" + (f" and {exists}" if exists else "")
        return out + [f"        if {guard}:"] + (self.block(post, depth + 1) or ["            pass"])

    def tile_loop(self, s: ir.For, m: Mapping, vector: int = 0) -> list[str]:
        """``width`` lanes per iteration of ``s``; they stride through the shared loop ``m.tile``,
        each reading its block rows ``vector`` values a load where ``m.vector`` names one."""
        lane = ir.Var(self.fresh("lane", "lane"))
        shared = dataclasses.replace(m.tile, start=ir.add(m.tile.start, lane), step=self.width,
                                     parallel=False)
        body = _replace(s.body, m.tile, shared)   # the block row inside keeps its identity
        if m.vector is not None:
            body = vectorised(dataclasses.replace(s, body=body), m.vector, vector, self.fresh).body
        out, exists, depth = self.lane_rows(s, f"{self.width} lanes share the loop over {m.tile.var}")
        self._atomic = m.atomic
        try:
            if exists:
                return out + [f"        if {exists}:"] + self.nested(body, depth)
            return out + self.nested(body, depth - 1)
        finally:
            self._atomic = False

    def merge_loop(self, s: ir.For, m: Mapping) -> list[str]:
        """Merge path over ``s``'s rows: thread t takes items [t*share, (t+1)*share) of the
        row ends and entries merged in order, found by two binary searches (:func:`_search`);
        a row wholly inside its share stores plainly, the first and last add atomically."""
        v = s.var
        n = {k: self.fresh(("mp", k), f"mp_{k}") for k in MERGE_NAMES}
        var = {k: ir.Var(name) for k, name in n.items()}
        k = s.body.index(m.warp)
        pre, post = s.body[:k], s.body[k + 1:]
        start, stop = m.warp.start, m.warp.stop
        last_row = ir.sub(ir.add(var["first"], var["rows"]), 1)
        share = ir.Bin("//", ir.add(var["items"], ir.sub(var["grid"], 1)), var["grid"])
        setup = [ir.Assign(n["first"], s.start), ir.Assign(n["rows"], ir.sub(s.stop, s.start))]
        work = [ir.Assign(n["base"], substitute(start, v, var["first"])),
                ir.Assign(n["entries"], ir.sub(substitute(stop, v, last_row), var["base"])),
                ir.Assign(n["items"], ir.add(var["rows"], var["entries"])),
                ir.Assign(n["share"], share),
                ir.Assign(n["d0"], ir.Call("min", (ir.mul(var["tid"], var["share"]), var["items"]))),
                ir.Assign(n["d1"], ir.Call("min", (ir.add(var["d0"], var["share"]), var["items"])))]
        walk = [*_search(n, "d0", "r0", stop, v), *_search(n, "d1", "r1", stop, v),
                ir.Assign(n["k0"], ir.sub(ir.add(var["base"], var["d0"]), var["r0"])),
                ir.Assign(n["k1"], ir.sub(ir.add(var["base"], var["d1"]), var["r1"]))]
        piece = (ir.Assign(v, ir.add(var["first"], var["row"])), *pre,
                 ir.Assign(n["lo"], ir.Call("max", (start, var["k0"]))),
                 ir.Assign(n["hi"], ir.Call("min", (stop, var["k1"]))),
                 dataclasses.replace(m.warp, start=var["lo"], stop=var["hi"]))
        rows = ir.Call("min", (ir.add(var["r1"], 1), var["rows"]))
        shared = ir.disj([ir.eq(var["row"], var["r0"]), ir.eq(var["row"], var["r1"])])
        out = ["    # merge path: row ends and entries, merged in order, split evenly over the threads",
               f"    {n['tid']} = cuda.grid(1)", f"    {n['grid']} = cuda.gridsize(1)"]
        out += self.block(setup, 1) + [f"    if {n['rows']} > 0:"] + self.block(work, 2)
        out += [f"        if {n['d0']} < {n['d1']}:"] + self.block(walk, 3)
        out += [f"            for {n['row']} in range({n['r0']}, {self.expr(rows)}):"] + self.block(piece, 4)
        out += [f"                if {n['lo']} < {n['hi']}:  # an empty piece adds nothing",
                f"                    if {self.expr(shared)}:  # a row the neighbouring threads may share"]
        self._atomic = True
        out += self.block(post, 6)
        self._atomic = False
        return out + ["                    else:"] + self.block(post, 6)

    def stmt(self, s: ir.Stmt, depth: int) -> list[str]:
        pad = "    " * depth
        if isinstance(s, ir.Store) and self._atomic:
            index = self.subscript(s.index)
            index = f"({index})" if len(s.index) > 1 else index
            atomic = ATOMIC.get(s.op) if s.accumulate else None
            if atomic is None:  # pragma: no cover - cuda_schedule spreads only loops whose folds have atomics
                raise UnsupportedOperation(f"no CUDA atomic folds with {s.op!r} into {s.array}")
            return [f"{pad}cuda.atomic.{atomic}({s.array}, {index}, {self.expr(s.value)})"]
        if isinstance(s, ir.Store) and isinstance(s.value, ir.Call) and s.value.fn == ROUND:
            return self.round_store(s, pad)
        if isinstance(s, ir.Return):
            return [f"{pad}result[0] = {self.expr(s.value)}"]
        if isinstance(s, ir.For) and s.parallel:  # threads come from the grid, not from prange
            s = ir.For(s.var, s.start, s.stop, s.body, False, s.step)
        if isinstance(s, ir.Sort):  # pragma: no cover - Tuning.CUDA writes no workspace levels
            raise UnsupportedOperation("the CUDA target does not sort output segments (workspace writers are CPU-only)")
        if isinstance(s, ir.Alloc):  # pragma: no cover - Tuning.CUDA reduces through no workspace
            raise UnsupportedOperation("the CUDA target allocates no kernel-local arrays (workspaces are CPU-only)")
        return super().stmt(s, depth)

    def round_store(self, s: ir.Store, pad: str) -> list[str]:
        """A bfloat16 store (``codegen.cuda_bfloat16``): the float32 value's bits, then the upper
        half rounded to nearest, ties to even (a NaN keeps its sign and becomes quiet)."""
        bits = self.fresh("bfloat16_bits", "bits")
        value = f"np.int64(float_as_int(np.float32({self.expr(s.value.args[0])}))) & 0xFFFFFFFF"
        nan = f"({bits} >> 16) | 0x40 if {bits} & 0x7FFFFFFF > 0x{FLOAT32_EXPONENT:08X}"
        nearest = f"({bits} + 0x7FFF + (({bits} >> 16) & 1)) >> 16"
        return [f"{pad}{bits} = {value}",
                f"{pad}{s.array}[{self.subscript(s.index)}] = {nan} else {nearest}"]

    def _expr(self, e: ir.Expr) -> tuple[str, int]:
        if isinstance(e, ir.Load) and e.array in self._readonly:  # never written here: ld.global.nc
            index = self.subscript(e.index)
            return f"ldg({e.array}, {index if len(e.index) == 1 else f'({index})'})", ATOM
        if isinstance(e, ir.Call) and e.fn == WIDEN:
            return f"int_as_float(np.int32({self.expr(e.args[0])}) << 16)", ATOM
        if isinstance(e, ir.Call) and e.fn == ROUND:  # pragma: no cover - cuda_bfloat16 rounds at stores only
            raise UnsupportedOperation("internal: a bfloat16 rounding outside a store")
        if isinstance(e, ir.Bin) and e.op in ARITHMETIC:
            # index words in arithmetic (delta gaps, packed words) as signed 64-bit: free on the
            # GPU, and the simulator's NumPy scalars would otherwise overflow uint8 / uint32
            e = ir.Bin(e.op, self._widened(e.left), self._widened(e.right))
        return super()._expr(e)

    def _widened(self, e: ir.Expr) -> ir.Expr:
        if isinstance(e, ir.Load) and e.array in self._index_arrays:
            return ir.Call("np.int64", (e,))
        return e

    _index_arrays: set = frozenset()
    _readonly: frozenset = frozenset()

    # -- host wrapper ----------------------------------------------------------------------------
    def launcher(self, fn: ir.Function, schedule: Schedule) -> list[str]:
        self.width = schedule.width
        m = planned(fn, schedule)
        names = [p.name for p in fn.params]
        args = names + (["result"] if _returns(fn) else [])
        out = [f"def launch_{fn.name}({', '.join(names + ['stream=0'])}):",
               f'    """Launch {fn.name} on `stream` ({schedule.kind})."""']
        out += [f"    {a} = {a}.view(np.uint16)  # bfloat16 as its bits" for a in names if a in bfloat16_arrays(fn)]
        if m.loop is None:
            config = "1, 1"
        else:
            scalars = {p.name for p in fn.params if p.role.kind in SCALAR_ROLES}
            work = ir.sub(m.loop.stop, m.loop.start)
            laned = m.tile is not None or (m.warp is not None and schedule.kind == "warp_per_row")
            per = schedule.width if laned else 1
            arrays: frozenset[str] = frozenset()
            if writes_chunks(fn):  # a thread per chunk: at most the rows of the table of counts
                work, arrays = _chunk_bound(fn, work), frozenset(names)
            if schedule.kind != "merge_path" and _host_known(work, scalars, arrays):
                text = self.expr(work, 10) + (f" * {per}" if per > 1 else "")
                out.append(f"    blocks = blocks_for({text}, {schedule.threads}, {schedule.max_blocks})")
                config = f"blocks, {schedule.threads}"
            else:
                config = f"{schedule.max_blocks}, {schedule.threads}"
        if _returns(fn):
            out.append("    result = np.zeros(1, np.int64)")
        out.append(f"    {fn.name}[{config}, stream]({', '.join(args)})")
        if _returns(fn):
            out.append("    return int(result[0])")
        return out

    width = WARP


def promises(m: Mapping, schedule: Schedule, readonly: bool = False) -> str:
    """The kernel's ``# promises:`` comment, what :mod:`codegen.cuda_checks` holds its machine
    code to: the register budget its launch bounds give ptxas, and whether it shuffles
    (warp_per_row), updates memory atomically (conflicting iterations, merge path) and reads
    operands it never writes through the read-only path (``readonly``: ``ld.global.nc``) and
    a row's values in vector loads (``m.vector``: ``ld.global.nc.v2`` / ``.v4``)."""
    shuffles = m.warp is not None and schedule.kind == "warp_per_row"
    atomics = m.atomic or (m.warp is not None and schedule.kind == "merge_path")
    return (f"at most {schedule.max_registers} registers a thread ({schedule.min_blocks} blocks of "
            f"{schedule.threads} threads a multiprocessor), {'' if shuffles else 'no '}warp shuffles, "
            f"{'' if atomics else 'no '}atomics, {'' if readonly else 'no '}read-only loads"
            + (", vector loads" if m.vector else ""))


def _search(n: dict, diagonal: str, into: str, stop: ir.Expr, var: str) -> list[ir.Stmt]:
    """Rows consumed before item ``diagonal`` of the merge path: the first ``r`` in
    ``[max(0, d - entries), min(d, rows)]`` whose row end ``stop(first + r) - base`` exceeds
    ``d - r - 1`` (the entry index the path is at). ``n``: the merge path's variable names
    (:data:`MERGE_NAMES` to the kernel's fresh names)."""
    d, lo, hi, mid = ir.Var(n[diagonal]), ir.Var(n["lo"]), ir.Var(n["hi"]), ir.Var(n["mid"])
    end = ir.sub(substitute(stop, var, ir.add(ir.Var(n["first"]), mid)), ir.Var(n["base"]))
    step = ir.If(ir.Bin("<=", end, ir.sub(ir.sub(d, mid), 1)), (ir.Assign(n["lo"], ir.add(mid, 1)),),
                 (ir.Assign(n["hi"], mid),))
    return [ir.Assign(n["lo"], ir.Call("max", (ir.Const(0), ir.sub(d, ir.Var(n["entries"]))))),
            ir.Assign(n["hi"], ir.Call("min", (d, ir.Var(n["rows"])))),
            ir.While(ir.lt(lo, hi), (ir.Assign(n["mid"], ir.Bin("//", ir.add(lo, hi), ir.Const(2))), step)),
            ir.Assign(n[into], lo)]


def _replace(body, old: ir.Stmt, new: ir.Stmt) -> tuple:
    """``body`` with the statement ``old`` (by identity, at any depth) replaced by ``new``."""
    out = []
    for s in body:
        if s is old:
            out.append(new)
            continue
        changes = {a: _replace(getattr(s, a), old, new) for a in ("body", "orelse") if hasattr(s, a)}
        out.append(dataclasses.replace(s, **changes) if changes else s)
    return tuple(out)


def _returns(fn: ir.Function) -> bool:
    return any(isinstance(s, ir.Return) for s in ir.walk(fn.body))


def _chunk_bound(fn: ir.Function, work: ir.Expr) -> ir.Expr:
    """The host's bound on a writer's chunk loop of ``work`` iterations (``min(span, len(counts))``,
    assigned before the loop): the rows of its table of counts; ``work`` itself when not found."""
    assigns = {s.name: s.value for s in fn.body if isinstance(s, ir.Assign) and not s.op}
    if isinstance(work, ir.Var) and work.name in assigns:
        work = assigns[work.name]
    counts = {p.name for p in fn.params if p.role.kind is Kind.OUT_COUNTS}
    if isinstance(work, ir.Call) and work.fn == "min":
        for arg in work.args:
            if isinstance(arg, ir.Call) and arg.fn == "len" and arg.args[0] in {ir.Var(c) for c in counts}:
                return arg
    return work


def _host_known(e: ir.Expr, scalars: set[str], arrays: frozenset[str] = frozenset()) -> bool:
    """Only constants, scalar parameters and the lengths of ``arrays`` (parameters): the host can
    evaluate it before the launch."""
    if isinstance(e, ir.Const):
        return True
    if isinstance(e, ir.Call) and e.fn == "len" and len(e.args) == 1 and isinstance(e.args[0], ir.Var):
        return e.args[0].name in arrays
    if isinstance(e, ir.Var):
        return e.name in scalars
    if isinstance(e, ir.Bin):
        return _host_known(e.left, scalars) and _host_known(e.right, scalars)
    if isinstance(e, ir.Neg):
        return _host_known(e.operand, scalars)
    if isinstance(e, ir.Call):
        return all(_host_known(a, scalars) for a in e.args)
    return False
