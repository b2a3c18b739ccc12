"""bfloat16 values on the cuda target, carried as their 16 bits.

NumPy has no bfloat16 and Numba's CUDA simulator none either (``numba.cuda.bf16`` is
None there), so a generated CUDA kernel sees a bfloat16 array as ``uint16`` bit
patterns (its launch wrapper views it so) and the loop IR says where the bits
become numbers: :func:`explicit` rewrites a module so that

* every load of a bfloat16 array is ``Call(WIDEN, (load,))``: the 16 bits shifted
  into a float32's upper half (exact: a bfloat16 is a float32 cut short), so
  products and sums run in float32;
* every store into one is a plain store of ``Call(ROUND, (value,))``: the float32
  value rounded to the nearest bfloat16, ties to even (NaN stays NaN); a folding
  store (``y[i] += v``) becomes ``y[i] = ROUND(WIDEN(y[i]) + v)``, so the old value
  and the sum add in float32. Such stores are not atomic: there is no atomic fold
  of 16-bit patterns, and CUDA schedules spread no loop whose stores conflict
  unless they fold atomically (``cuda_schedule``).

The CUDA emitter renders the two calls (``emit_cuda``); it runs on the module before
the schedules are chosen. The rewrite never sees formats: which parameters hold
bfloat16 values follows from their roles (a tensor's values or dense array, an
output's values; an epilog pass's flat array when its statement's output is one).
"""

from __future__ import annotations

import dataclasses

from . import loopir as ir
from .optimize import fold
from .roles import Kind

WIDEN = "bfloat16_widen"   # ``Call(WIDEN, (bits,))``: the float32 of a bfloat16's bits
ROUND = "bfloat16_round"   # ``Call(ROUND, (x,))``: a float32 rounded to a bfloat16's bits (nearest even)
#: roles whose array holds a tensor's values (never its coordinates)
VALUE_ROLES = frozenset({Kind.VALS, Kind.ARRAY, Kind.OUT_VALS})


def explicit(module: ir.Module, tensors: frozenset[str]) -> ir.Module:
    """``module`` with the bfloat16 arrays of ``tensors`` (names of the bfloat16 operands and
    outputs) read and written as the module docstring says; ``module`` itself when none is."""
    if not tensors:
        return module
    tensors = frozenset(tensors) | _aliases(module, tensors)
    narrow = {fn.name: arrays(fn, tensors) for fn in module.functions}
    for plan in module.meta.get("plan", ()):   # an epilog pass over a bfloat16 output's elements
        if plan.epilog in narrow and _stores(module, plan.function) & narrow.get(plan.function, set()):
            epilog = next(fn for fn in module.functions if fn.name == plan.epilog)
            narrow[plan.epilog] = {p.name for p in epilog.params if p.role.kind is Kind.OUT_FLAT}
    functions = tuple(rewrite(fn, frozenset(narrow[fn.name])) for fn in module.functions)
    return dataclasses.replace(module, functions=functions)


def arrays(fn: ir.Function, tensors: frozenset[str]) -> set[str]:
    """The parameters of ``fn`` holding values of ``tensors``."""
    return {p.name for p in fn.params if p.role.kind in VALUE_ROLES and p.role.tensor in tensors}


def rewrite(fn: ir.Function, narrow: frozenset[str]) -> ir.Function:
    """``fn`` with the arrays ``narrow`` (parameter names) widened where read, rounded where written."""
    if not narrow:
        return fn
    return dataclasses.replace(fn, body=tuple(_stmt(s, narrow) for s in fn.body))


def bfloat16_arrays(fn: ir.Function) -> set[str]:
    """The arrays ``fn`` reads through :data:`WIDEN` or writes through :data:`ROUND` (what a
    launch wrapper views as 16-bit patterns)."""
    out = set()
    for s in ir.walk(fn.body):
        if isinstance(s, ir.Store) and isinstance(s.value, ir.Call) and s.value.fn == ROUND:
            out.add(s.array)
        for e in ir.children(s):
            out.update(n.args[0].array for n in ir.nodes(e)
                       if isinstance(n, ir.Call) and n.fn == WIDEN and isinstance(n.args[0], ir.Load))
    return out


def _stmt(s: ir.Stmt, narrow: frozenset[str]) -> ir.Stmt:
    changes = {}
    for f in dataclasses.fields(s):
        value = getattr(s, f.name)
        if isinstance(value, ir.Expr):
            changes[f.name] = _expr(value, narrow)
        elif isinstance(value, tuple) and value and isinstance(value[0], ir.Stmt):
            changes[f.name] = tuple(_stmt(b, narrow) for b in value)
        elif isinstance(value, tuple):
            changes[f.name] = tuple(_expr(e, narrow) if isinstance(e, ir.Expr) else e for e in value)
    s = dataclasses.replace(s, **changes) if changes else s
    if isinstance(s, ir.Store) and s.array in narrow:
        value = s.value
        if s.accumulate:
            value = fold(s.op, _widened(ir.Load(s.array, s.index)), value)
        return ir.Store(s.array, s.index, ir.Call(ROUND, (value,)), accumulate=False, atomic=False)
    return s


def _expr(e: ir.Expr, narrow: frozenset[str]) -> ir.Expr:
    if isinstance(e, ir.Call) and e.fn == "np.float32" and len(e.args) == 1 and _narrow_load(e.args[0], narrow):
        return _expr(e.args[0], narrow)   # the lowering's float32 read of a narrow value: widened below
    changes = {}
    for f in dataclasses.fields(e):
        value = getattr(e, f.name)
        if isinstance(value, ir.Expr):
            changes[f.name] = _expr(value, narrow)
        elif isinstance(value, tuple):
            changes[f.name] = tuple(_expr(v, narrow) if isinstance(v, ir.Expr) else v for v in value)
    e = dataclasses.replace(e, **changes) if changes else e
    return _widened(e) if _narrow_load(e, narrow) else e


def _narrow_load(e: ir.Expr, narrow: frozenset[str]) -> bool:
    return isinstance(e, ir.Load) and e.array in narrow


def _widened(load: ir.Load) -> ir.Expr:
    return ir.Call(WIDEN, (load,))


def _aliases(module: ir.Module, tensors: frozenset[str]) -> set[str]:
    """Second names of ``tensors`` (an operand read twice, ``StatementPlan.alias``)."""
    return {alias for plan in module.meta.get("plan", ()) for alias, original in plan.alias if original in tensors}


def _stores(module: ir.Module, function: str) -> set[str]:
    """The arrays function ``function`` of ``module`` stores into."""
    fn = next((f for f in module.functions if f.name == function), None)
    return set() if fn is None else {s.array for s in ir.walk(fn.body) if isinstance(s, ir.Store)}
