"""Numba CPU emitter: loop IR → readable Python compiled with ``numba.njit``.

A visitor over :mod:`codegen.loopir`. Every function gets
``@njit(cache=True, nogil=True)`` (``parallel=True`` and ``prange`` when a loop is
marked parallel), so the compiled machine code is cached next to the source
file in the kernel cache. Subscripts proved non-negative (:class:`loopir.Index`)
are cast to ``np.uintp`` when ``unsigned_index`` is on: Numba then skips its
negative-index wrap-around check (measured +15–36% on gather-heavy SpMV).

User functions (the module's :class:`~codegen.loopir.Extern` s) are bound at import:
``relu_3fa2 = _ustc_function("<key>", "cpu")`` (``codegen.functions.resolve``, a
``numba.njit`` dispatcher the kernels call). Folds other than ``+ * | &`` are written
``acc = min(acc, v)``; infinite constants as ``np.inf``.
"""

from __future__ import annotations

import math

from . import loopir as ir
from .names import FreshNames

RESOLVE = "_ustc_function"
#: the allocator of uninitialised kernel-local arrays (huge pages for large ones: ustc.kernels._alloc)
EMPTY = "_ustc_empty"


def extern_lines(module: ir.Module, target: str) -> list[str]:
    """The import and binding lines of ``module``'s user functions for ``target``."""
    if not module.externs:
        return []
    lines = [f"from ustc.codegen.functions import resolve as {RESOLVE}", ""]
    return lines + [f'{e.name} = {RESOLVE}("{e.key}", "{target}")' for e in module.externs] + [""]


def protect(fn: ir.Function, reserved) -> ir.Function:
    """``fn`` with every name it uses that is also in ``reserved`` (the module's imports and
    functions, a target's fixed names) renamed to a fresh one: a tensor named ``np`` or ``cuda``
    becomes the parameter ``np_2`` (roles, not names, tell the host what to pass)."""
    return ir.rename(fn, renames(fn, reserved))


def renames(fn: ir.Function, reserved) -> dict[str, str]:
    """``{name: fresh name}`` for the names of ``fn`` in ``reserved`` (:func:`protect`)."""
    used = ir.names_in(fn)
    clash = sorted(used & set(reserved))
    if not clash:
        return {}
    fresh = FreshNames(used | set(reserved))
    return {name: fresh(("reserved", name), name) for name in clash}


def parallel(fn: ir.Function) -> bool:
    """Whether ``fn`` has a loop marked parallel."""
    return any(isinstance(s, ir.For) and s.parallel for s in ir.walk(fn.body))


def serial_name(name: str) -> str:
    return f"{name}_serial"


PRECEDENCE = {"or": 1, "and": 2, "==": 4, "!=": 4, "<": 4, "<=": 4, ">": 4, ">=": 4, "|": 5, "&": 7,
              ">>": 8, "<<": 8, "+": 9, "-": 9, "*": 10, "//": 10, "%": 10}
ATOM = 12


class CpuEmitter:
    """``emit(module)`` returns the module's source text."""

    target = "cpu"
    #: names the emitted module binds at module level (its imports; :meth:`module_names` adds the
    #: functions and externs): a user tensor or index spelled like one is renamed in the kernel
    GLOBALS = frozenset({"np", "njit", "prange", RESOLVE, EMPTY})

    def __init__(self, unsigned_index: bool = True):
        self.unsigned_index = unsigned_index
        self._serial = False

    # -- module and functions ---------------------------------------------------------------
    def emit(self, module: ir.Module) -> str:
        lines = [f"# {line}" if line else "#" for line in module.header]
        lines += ["", "import numpy as np", "from numba import njit, prange", ""]
        if any(isinstance(s, ir.Alloc) and not s.zero for fn in module.functions for s in ir.walk(fn.body)):
            lines += [f"from ustc.kernels._alloc import empty as {EMPTY}", ""]
        lines += extern_lines(module, "cpu")
        reserved = self.module_names(module)
        for fn in module.functions:
            lines += ["", *self.function(protect(fn, reserved)), ""]
        return "\n".join(lines).rstrip() + "\n"

    def module_names(self, module: ir.Module) -> frozenset[str]:
        """Every name the emitted module binds at module level (:attr:`GLOBALS`, each function,
        its serial twin, each extern)."""
        names = set(self.GLOBALS) | {e.name for e in module.externs}
        for fn in module.functions:
            names |= {fn.name, serial_name(fn.name)}
        return frozenset(names)

    def function(self, fn: ir.Function) -> list[str]:
        """The function; a parallel one is followed by its serial twin ``<name>_serial`` (same body,
        ``range`` for ``prange``), which the host calls for small operands: Numba compiles it only
        if it is called."""
        if not parallel(fn):
            return self._function(fn, fn.name, "cache=True, nogil=True")
        twin = self._function(fn, serial_name(fn.name), "cache=True, nogil=True", serial=True)
        return self._function(fn, fn.name, "cache=True, nogil=True, parallel=True") + ["", ""] + twin

    def _function(self, fn: ir.Function, name: str, flags: str, serial: bool = False) -> list[str]:
        self._serial = serial
        self._names = FreshNames(ir.names_in(fn))  # prange's unsigned induction variables
        out = [f"@njit({flags})", f"def {name}({', '.join(p.name for p in fn.params)}):"]
        if fn.doc:
            out.append(f'    """{fn.doc}"""' if not serial else f'    """{fn.doc} (serial: for small operands)"""')
        body = self.block(fn.body, 1)
        self._serial = False
        return out + (body or ["    pass"])

    # -- statements -----------------------------------------------------------------------------
    def block(self, body, depth: int) -> list[str]:
        out: list[str] = []
        for stmt in body:
            out += self.stmt(stmt, depth)
        return out

    def stmt(self, s: ir.Stmt, depth: int) -> list[str]:
        pad = "    " * depth
        if isinstance(s, ir.Assign):
            if s.op and s.op not in ir.INPLACE:
                return [f"{pad}{s.name} = {s.op}({s.name}, {self.expr(s.value)})"]
            return [f"{pad}{s.name} {s.op}= {self.expr(s.value)}"]
        if isinstance(s, ir.Store):
            target = f"{s.array}[{self.subscript(s.index)}]"
            if s.accumulate and s.op not in ir.INPLACE:
                return [f"{pad}{target} = {s.op}({target}, {self.expr(s.value)})"]
            op = f"{s.op}=" if s.accumulate else "="
            return [f"{pad}{target} {op} {self.expr(s.value)}"]
        if isinstance(s, ir.For):
            bounds = self.expr(s.stop) if s.start == ir.Const(0) else f"{self.expr(s.start)}, {self.expr(s.stop)}"
            bounds += f", {s.step}" if s.step != 1 else ""
            bounds = f"0, {bounds}" if s.step != 1 and s.start == ir.Const(0) else bounds
            if s.parallel and not self._serial:  # Numba types a prange index unsigned: -i would wrap
                u = self._names(("prange", s.var), f"{s.var}_u")
                signed = ir.Assign(s.var, ir.Call("np.intp", (ir.Var(u),)))
                return [f"{pad}for {u} in prange({bounds}):"] + self.nested((signed,) + tuple(s.body), depth)
            return [f"{pad}for {s.var} in range({bounds}):"] + self.nested(s.body, depth)
        if isinstance(s, ir.While):
            return [f"{pad}while {self.expr(s.cond)}:"] + self.nested(s.body, depth)
        if isinstance(s, ir.If):
            return self.if_chain(s, depth, "if")
        if isinstance(s, ir.Comment):
            return [f"{pad}# {s.text}"]
        if isinstance(s, ir.Return):
            return [f"{pad}return {self.expr(s.value)}"]
        if isinstance(s, ir.Sort):
            return [f"{pad}{s.array}[{self.expr(s.start)}:{self.expr(s.stop)}].sort()"]
        if isinstance(s, ir.Alloc):
            if s.zero:
                return [f"{pad}{s.name} = np.zeros({self.expr(s.size)}, dtype=np.{s.dtype})"]
            return [f"{pad}{s.name} = {EMPTY}({self.expr(s.size)}, np.{s.dtype})"]
        raise TypeError(f"cannot emit {s!r}")

    def nested(self, body, depth: int) -> list[str]:
        return self.block(body, depth + 1) or ["    " * (depth + 1) + "pass"]

    def if_chain(self, s: ir.If, depth: int, keyword: str) -> list[str]:
        pad = "    " * depth
        out = [f"{pad}{keyword} {self.expr(s.cond)}:"] + self.nested(s.body, depth)
        if len(s.orelse) == 1 and isinstance(s.orelse[0], ir.If):
            return out + self.if_chain(s.orelse[0], depth, "elif")
        if s.orelse:
            out += [f"{pad}else:"] + self.nested(s.orelse, depth)
        return out

    # -- expressions ------------------------------------------------------------------------------
    def subscript(self, index) -> str:
        return ", ".join(self.expr(i) for i in index)

    def expr(self, e: ir.Expr, context: int = 0) -> str:
        text, prec = self._expr(e)
        return f"({text})" if prec < context else text

    def _expr(self, e: ir.Expr) -> tuple[str, int]:
        if isinstance(e, ir.Var):
            return e.name, ATOM
        if isinstance(e, ir.Const):
            if e.dtype is not None:
                return f"np.{e.dtype}({e.value!r})", ATOM
            if isinstance(e.value, float) and not math.isfinite(e.value):
                text = "np.nan" if math.isnan(e.value) else "np.inf" if e.value > 0 else "-np.inf"
                return text, ATOM if text[0] != "-" else 11
            return repr(e.value), ATOM if not (isinstance(e.value, (int, float)) and e.value < 0) else 11
        if isinstance(e, ir.Index):
            inner = self.expr(e.value)
            return (f"np.uintp({inner})", ATOM) if self.unsigned_index and not isinstance(e.value, ir.Const) \
                else self._expr(e.value)
        if isinstance(e, ir.Load):
            return f"{e.array}[{self.subscript(e.index)}]", ATOM
        if isinstance(e, ir.Bin):
            prec = PRECEDENCE[e.op]
            left = self.expr(e.left, prec)
            right = self.expr(e.right, prec + (0 if e.op in ("and", "or") else 1))
            return f"{left} {e.op} {right}", prec
        if isinstance(e, ir.Neg):
            return f"-{self.expr(e.operand, 11)}", 11
        if isinstance(e, ir.Call):
            return f"{e.fn}({', '.join(self.expr(a) for a in e.args)})", ATOM
        if isinstance(e, ir.Select):
            return f"{self.expr(e.then, 1)} if {self.expr(e.cond, 1)} else {self.expr(e.orelse, 1)}", 0
        raise TypeError(f"cannot emit {e!r}")
