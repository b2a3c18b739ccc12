"""Numba CUDA emitter: the same loop IR as the CPU target → readable ``numba.cuda`` source.

A visitor over :mod:`codegen.loopir`; it never sees formats. Per loop-IR function it
writes a device kernel ``kernel_k`` (``@cuda.jit(cache=True)``) and a host wrapper
``launch_kernel_k`` taking the CPU kernel's arguments (plus ``stream``), choosing the
grid and returning what the CPU kernel returns (the entry count of a serial
sparse-output pass). How iterations map to threads (:func:`mapping`):

* the outermost loop the lowering marked ``parallel`` (no two iterations write the
  same output element) becomes a grid-stride loop, stores plain — a thread per row
  (CSR, CSF), per block row (BSR), per row of every diagonal (DIA: the optimizer
  hoisted the row loop above the diagonals, one row per iteration), per nonzero
  chunk split at run borders (COO);
* otherwise the first top-level loop whose iterations carry nothing but register
  sums becomes a grid-stride loop and its output updates become ``cuda.atomic.add``
  (CSC SpMV, column sums) — atomics only where the loop IR says iterations conflict;
* otherwise one thread runs the function (a sparse output appended serially).

:class:`Schedule` refines the first case: ``warp_per_row`` gives each iteration
``width`` lanes that stride through its innermost reduction loop and combine
their sums with ``cuda.shfl_down_sync``. :func:`choose_schedule` picks it from the
loop IR and the mean row length of the reduced level (:func:`vector_width`); a
caller's choice always wins where it applies.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import loopir as ir
from .emit_cpu import CpuEmitter

SCHEDULES = ("thread_per_row", "warp_per_row", "serial")
WARP = 32
FULL_MASK = "0xFFFFFFFF"
SCALAR_ROLES = ("size", "lo", "extent", "scalar")
ARITHMETIC = ("+", "-", "*", "//", "%", "&", ">>", "<<")


@dataclass(frozen=True)
class Schedule:
    """How a kernel's iterations map to CUDA threads (see the module docstring)."""

    kind: str = "thread_per_row"
    width: int = WARP        # lanes per iteration (warp_per_row): 2, 4, 8, 16 or 32
    threads: int = 256       # threads per block
    max_blocks: int = 4096   # grid-stride loops cover any trip count with at most this many blocks
    reason: str = field(default="", compare=False)

    def __post_init__(self):
        if self.kind not in SCHEDULES:
            raise ValueError(f"unknown CUDA schedule {self.kind!r} (schedules: {', '.join(SCHEDULES)})")
        if self.width not in (2, 4, 8, 16, 32) or self.threads % WARP or self.threads <= 0:
            raise ValueError(f"bad schedule {self}: width in 2..32 (a power of two), threads a multiple of 32")

    def describe(self) -> str:
        text = f"{self.kind}" + (f"(width={self.width})" if self.kind == "warp_per_row" else "")
        text += ", one thread" if self.kind == "serial" else f", {self.threads} threads/block"
        return text + (f" — {self.reason}" if self.reason else "")


def vector_width(mean: float, longest: int) -> int:
    """Lanes per row for rows of this mean length (0: a thread per row is better).

    Short rows (mean < 4) keep a thread each; longer ones get the power of two at or
    above the mean, up to a warp; skewed rows (the longest over 32× the mean) a warp."""
    if longest > 32 * max(mean, 1.0) and longest >= 64:
        return WARP
    if mean < 4:
        return 0
    width = 4
    while width < mean and width < WARP:
        width *= 2
    return width


# -- how a function maps to threads -------------------------------------------------------

@dataclass(frozen=True)
class Mapping:
    loop: ir.For | None           # spread over threads; None: one thread runs the function
    atomic: bool = False          # iterations may update the same output element
    warp: ir.For | None = None    # the reduction loop that lanes share (warp_per_row)
    acc: str = ""


def mapping(fn: ir.Function, warp: bool = False) -> Mapping:
    body = fn.body
    for k, s in enumerate(body):
        if not isinstance(s, ir.For):
            continue
        pre, post = body[:k], body[k + 1:]
        if not all(isinstance(p, (ir.Assign, ir.Comment)) for p in pre):
            break
        if s.parallel and not post:
            found = _warp_loop(s, fn) if warp else None
            return Mapping(s, False, *found) if found else Mapping(s)
        if _distributable(s, pre, post):  # a parallel loop whose rows all add into one sum, too
            return Mapping(s, atomic=True)
        break
    return Mapping(None)


def _assigned(body) -> set[str]:
    names = set()
    for s in ir.walk(body):
        if isinstance(s, ir.Assign):
            names.add(s.name)
        elif isinstance(s, ir.For):
            names.add(s.var)
    return names


def _exprs(s: ir.Stmt):
    """The expressions of one statement (not of the statements nested in it)."""
    if isinstance(s, ir.Store):
        return (*s.index, s.value)
    if isinstance(s, ir.For):
        return (s.start, s.stop)
    return tuple(getattr(s, a) for a in ("value", "cond") if isinstance(getattr(s, a, None), ir.Expr))


def _vars(e: ir.Expr) -> set[str]:
    if isinstance(e, ir.Var):
        return {e.name}
    out: set[str] = set()
    for attr in ("left", "right", "operand", "value", "cond", "then", "orelse"):
        child = getattr(e, attr, None)
        if isinstance(child, ir.Expr):
            out |= _vars(child)
    for child in getattr(e, "index", ()) + getattr(e, "args", ()):
        out |= _vars(child)
    return out


def _read(body) -> set[str]:
    return {n for s in ir.walk(body) for e in _exprs(s) for n in _vars(e)}


def _distributable(loop: ir.For, pre, post) -> bool:
    """Iterations share only register sums started before the loop (``acc = 0``, ``acc += e``)
    and update outputs with ``+=``; the sums are added to outputs after the loop."""
    stmts = list(ir.walk(loop.body))
    if any(isinstance(s, (ir.Return, ir.While)) or (isinstance(s, ir.Store) and not s.accumulate)
           for s in stmts):
        return False
    before = {p.name: p for p in pre if isinstance(p, ir.Assign)}
    carried = _assigned(loop.body) & set(before)
    for name in carried:
        if not isinstance(before[name].value, ir.Const):
            return False
        if any(isinstance(s, ir.Assign) and s.name == name and s.op != "+" for s in stmts):
            return False
        others = [s for s in stmts if not (isinstance(s, ir.Assign) and s.name == name)]
        if any(name in _vars(e) for s in others for e in _exprs(s)):
            return False
    for s in post:
        if not (isinstance(s, ir.Store) and s.accumulate):
            return False
    return True


def _warp_loop(loop: ir.For, fn: ir.Function):
    """``(reduction loop, accumulator)`` when ``loop`` is ``acc = 0; <assigns>; for p: ...;
    acc += e; <stores of acc at the loop variable>`` — the shape lanes can share."""
    body = loop.body
    loops = [k for k, s in enumerate(body) if isinstance(s, ir.For)]
    if len(loops) != 1 or loop.step != 1:
        return None
    k = loops[0]
    inner, pre, post = body[k], body[:k], body[k + 1:]
    if inner.parallel or inner.step != 1 or not inner.body:
        return None
    last = inner.body[-1]
    if not (isinstance(last, ir.Assign) and last.op == "+"):
        return None
    acc = last.name
    if not all(isinstance(s, ir.Assign) and s.name != acc and not s.op for s in inner.body[:-1]):
        return None
    if not any(isinstance(s, ir.Assign) and s.name == acc and isinstance(s.value, ir.Const) for s in pre):
        return None
    if not all(isinstance(s, ir.Assign) for s in pre) or not post:
        return None
    scalars = {p.name for p in fn.params if p.role[0] in SCALAR_ROLES}
    allowed = {loop.var, acc} | scalars
    for s in post:
        if not isinstance(s, ir.Store) or not _read((s,)) <= allowed:
            return None
    return inner, acc


def reduced_level(fn: ir.Function, m: Mapping):
    """``(tensor, level)`` whose segments the warp's reduction loop walks (for row statistics)."""
    if m.warp is None:
        return None
    roles = {p.name: p.role for p in fn.params}
    for e in (m.warp.start, m.warp.stop):
        if isinstance(e, ir.Call) and e.fn == "np.intp":  # a signed view of an index load
            e = e.args[0]
        if isinstance(e, ir.Load) and roles.get(e.array, ("",))[0] == "pos":
            return roles[e.array][1], roles[e.array][2]
    return None


def choose_schedule(fn: ir.Function, widths: dict | None = None, override=None,
                    simulator: bool = False) -> Schedule:
    """The schedule for ``fn``: ``override`` (a :class:`Schedule`, a kind, or ``"warp_per_row:8"``)
    where it applies, else warp_per_row when the reduced level's ``widths[(tensor, level)]``
    (from :func:`vector_width`) is non-zero, else thread_per_row (serial when nothing is parallel)."""
    base = {"threads": WARP, "max_blocks": 2} if simulator else {}
    request = _parse(override, base)
    m = mapping(fn, warp=True)
    if m.loop is None:
        return Schedule("serial", threads=WARP, max_blocks=1, reason="no loop runs in parallel")
    if request is not None:
        if request.kind == "warp_per_row" and m.warp is None:
            return Schedule(**base, reason="warp_per_row requested but the kernel has no shared row reduction")
        if request.kind == "serial":
            return Schedule("serial", threads=WARP, max_blocks=1, reason="requested")
        return Schedule(request.kind, request.width, request.threads, request.max_blocks, reason="requested")
    level = reduced_level(fn, m)
    width = (widths or {}).get(level, 0) if level is not None else 0
    if width:
        return Schedule("warp_per_row", width, **base, reason=f"rows of {level[0]} level {level[1]}: "
                                                               f"{width} lanes by mean row length")
    reason = "no shared row reduction" if m.warp is None else "short rows"
    return Schedule(**base, reason=reason + (", atomic updates" if m.atomic else ""))


def _parse(override, base: dict) -> Schedule | None:
    if override is None or isinstance(override, Schedule):
        return override
    kind, _, width = str(override).partition(":")
    return Schedule(kind.strip(), int(width) if width else WARP, **base)


# -- the emitter ---------------------------------------------------------------------------

class CudaEmitter(CpuEmitter):
    """``emit(module, schedules)`` returns the module's source text."""

    target = "cuda"

    def __init__(self, unsigned_index: bool = True):
        super().__init__(unsigned_index)
        self._atomic = False

    def emit(self, module: ir.Module, schedules: dict | None = None) -> str:
        lines = [f"# {line}" if line else "#" for line in module.header]
        lines += ["", "import numpy as np", "from numba import cuda", "", "",
                  "def blocks_for(work, threads, limit):",
                  '    """Blocks for `work` grid-stride iterations: at least 1, at most `limit`."""',
                  "    return max(1, min(limit, (work + threads - 1) // threads))", ""]
        for fn in module.functions:
            schedule = (schedules or {}).get(fn.name) or choose_schedule(fn)
            lines += ["", *self.kernel(fn, schedule), "", "", *self.launcher(fn, schedule), ""]
        return "\n".join(lines).rstrip() + "\n"

    def _mapping(self, fn: ir.Function, schedule: Schedule) -> Mapping:
        if schedule.kind == "serial":
            return Mapping(None)
        m = mapping(fn, warp=schedule.kind == "warp_per_row")
        return m if schedule.kind == "warp_per_row" or m.warp is None else Mapping(m.loop, m.atomic)

    # -- device kernel ----------------------------------------------------------------------
    def kernel(self, fn: ir.Function, schedule: Schedule) -> list[str]:
        self.width = schedule.width
        self._index_arrays = {p.name for p in fn.params if p.role[0] in ("pos", "crd")}
        m = self._mapping(fn, schedule)
        params = [p.name for p in fn.params] + (["result"] if _returns(fn) else [])
        out = [f"# schedule: {schedule.describe()}", "@cuda.jit(cache=True)",
               f"def {fn.name}({', '.join(params)}):"]
        if fn.doc:
            out.append(f'    """{fn.doc}"""')
        body: list[str] = []
        after = False
        for s in fn.body:
            if s is m.loop:
                body += self.warp_loop(s, m) if m.warp is not None else \
                    self.grid_loop(s, m.atomic and not s.parallel)
                after = True
            else:
                self._atomic = after and m.atomic
                body += self.stmt(s, 1)
                self._atomic = False
        return out + (body or ["    pass"])

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

    def warp_loop(self, s: ir.For, m: Mapping) -> list[str]:
        """``width`` lanes per iteration of ``s``; lanes stride through ``m.warp`` and shuffle-add."""
        w = self.width
        rows = WARP // w
        pad, pad2, pad3 = "    ", "        ", "            "
        k = s.body.index(m.warp)
        pre, post = s.body[:k], s.body[k + 1:]
        init = [p for p in pre if isinstance(p, ir.Assign) and p.name == m.acc]
        pre = [p for p in pre if not any(p is q for q in init)]
        start, stop = ("" if s.start == ir.Const(0) else self.expr(s.start, 9) + " + "), self.expr(s.stop)
        lane = ir.Var("lane")
        inner = ir.For(m.warp.var, ir.add(m.warp.start, lane), m.warp.stop, m.warp.body, step=w)
        out = [f"{pad}lane = cuda.threadIdx.x % {w}  # {w} lanes per {s.var}"]
        if rows == 1:
            out += [f"{pad}for {s.var} in range({start}cuda.grid(1) // 32, {stop}, cuda.gridsize(1) // 32):"]
            out += self.block(init, 2) + self.block([*pre, inner], 2)
            guard = "lane == 0"
            depth = 2
        else:
            out += [f"{pad}group = cuda.threadIdx.x % 32 // {w}  # {rows} {s.var} per warp",
                    f"{pad}for {s.var}_base in range({start}cuda.grid(1) // 32 * {rows}, {stop}, "
                    f"cuda.gridsize(1) // 32 * {rows}):",
                    f"{pad2}{s.var} = {s.var}_base + group"]
            out += self.block(init, 2) + [f"{pad2}if {s.var} < {stop}:"] + self.block([*pre, inner], 3)
            guard = f"lane == 0 and {s.var} < {stop}"
            depth = 2
        offset = w // 2
        while offset:
            out.append(f"{pad2}{m.acc} += cuda.shfl_down_sync({FULL_MASK}, {m.acc}, {offset})")
            offset //= 2
        out += [f"{pad2}if {guard}:"] + (self.block(post, depth + 1) or [f"{pad3}pass"])
        return out

    def stmt(self, s: ir.Stmt, depth: int) -> list[str]:
        pad = "    " * depth
        if isinstance(s, ir.Store) and self._atomic:
            index = self.subscript(s.index)
            index = f"({index})" if len(s.index) > 1 else index
            return [f"{pad}cuda.atomic.add({s.array}, {index}, {self.expr(s.value)})"]
        if isinstance(s, ir.Return):
            return [f"{pad}result[0] = {self.expr(s.value)}"]
        if isinstance(s, ir.For) and s.parallel:  # threads come from the grid, not from prange
            s = ir.For(s.var, s.start, s.stop, s.body, False, s.step)
        return super().stmt(s, depth)

    def _expr(self, e: ir.Expr) -> tuple[str, int]:
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

    # -- host wrapper ----------------------------------------------------------------------------
    def launcher(self, fn: ir.Function, schedule: Schedule) -> list[str]:
        self.width = schedule.width
        m = self._mapping(fn, schedule)
        names = [p.name for p in fn.params]
        args = names + (["result"] if _returns(fn) else [])
        out = [f"def launch_{fn.name}({', '.join(names + ['stream=0'])}):",
               f'    """Launch {fn.name} on `stream` ({schedule.kind})."""']
        if m.loop is None:
            config = "1, 1"
        else:
            scalars = {p.name for p in fn.params if p.role[0] in SCALAR_ROLES}
            work = ir.sub(m.loop.stop, m.loop.start)
            per = schedule.width if m.warp is not None else 1
            if _host_known(work, scalars):
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


def _returns(fn: ir.Function) -> bool:
    return any(isinstance(s, ir.Return) for s in ir.walk(fn.body))


def _host_known(e: ir.Expr, scalars: set[str]) -> bool:
    """Only constants and scalar parameters: the host can evaluate it before the launch."""
    if isinstance(e, ir.Const):
        return True
    if isinstance(e, ir.Var):
        return e.name in scalars
    if isinstance(e, ir.Bin):
        return _host_known(e.left, scalars) and _host_known(e.right, scalars)
    if isinstance(e, ir.Neg):
        return _host_known(e.operand, scalars)
    if isinstance(e, ir.Call):
        return all(_host_known(a, scalars) for a in e.args)
    return False
