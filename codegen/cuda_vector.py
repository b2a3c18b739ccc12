"""Vector loads of a row: the values a row loop reads, ``n`` per 64- or 128-bit load.

:func:`codegen.cuda_schedule.planned` marks (``Mapping.vector``, a ``VectorRow``) the row
loop and the values array it reads at ``at = offset + var`` (a thread_per_row kernel's
row: ``at`` is the loop variable, ``offset`` 0; a block row of BSR, a thread's or a
block_tile lane's: ``A_p3 = A_p2 * c + v_j_modc``), when the schedule chose ``vector = n``
from the values' item size. :func:`vectorised` rewrites the loop holding that row so
that it runs, in the same order as before (a sum and a running coordinate see the same
sequence), as::

    lo = start; hi = stop
    first = min(hi, lo + ((-element_address(vals) - offset) % n - lo) % n)
    for var in range(lo, first):          body                  # head: scalar loads
    for q in range(first, hi - n + 1, n):                       # whole vectors
        v = ldg<n>(vals, offset + q)                            # one load, vals[offset + q] aligned
        var = q;         body with vals[at] -> v[0]
        ...
        var = q + n - 1; body with vals[at] -> v[n - 1]
    for var in range(first + (hi - first) // n * n, hi): body   # tail: scalar loads

``q`` starts where ``vals[offset + q]`` is ``n``-element aligned in memory, however the
buffer was allocated or sliced, and ``offset + q + n <= offset + hi``: no load reads past
the row's end (for a block row, past the block row; a partial block at the matrix's
edge has ``hi`` below the block's width).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from . import loopir as ir
from .cuda_schedule import VectorRow


def vectorised(loop: ir.For, target: VectorRow, n: int, fresh: Callable[[object, str], str]) -> ir.For:
    """``loop`` with its statement ``target.row`` (by identity, at any depth) run ``n`` values of
    ``target.array`` a load; ``fresh(key, base)`` names the new variables."""
    row, array = target.row, target.array
    name = {k: fresh(("vector", k), f"{row.var}_{k}") for k in ("lo", "hi", "first", "q", "v")}
    var = {k: ir.Var(v) for k, v in name.items()}
    address = ir.Neg(ir.Call("element_address", (ir.Var(array),)))
    lead = ir.Bin("%", ir.sub(address, target.offset), ir.Const(n))
    first = ir.Call("min", (var["hi"], ir.add(var["lo"], ir.Bin("%", ir.sub(lead, var["lo"]), ir.Const(n)))))
    whole = ir.mul(ir.Bin("//", ir.sub(var["hi"], var["first"]), ir.Const(n)), n)
    unrolled: list[ir.Stmt] = [ir.Assign(name["v"], ir.Call(f"ldg{n}", (ir.Var(array), ir.add(target.offset,
                                                                                              var["q"]))))]
    for k in range(n):
        element = ir.Load(name["v"], (ir.Const(k),))
        unrolled.append(ir.Assign(row.var, ir.add(var["q"], k)))
        unrolled += [_replace_loads(s, array, target.at, element) for s in row.body]
    steps = (ir.Assign(name["lo"], row.start), ir.Assign(name["hi"], row.stop), ir.Assign(name["first"], first),
             dataclasses.replace(row, start=var["lo"], stop=var["first"]),
             ir.For(name["q"], var["first"], ir.add(ir.sub(var["hi"], n), 1), tuple(unrolled), step=n),
             dataclasses.replace(row, start=ir.add(var["first"], whole), stop=var["hi"]))
    return dataclasses.replace(loop, body=_splice(loop.body, row, steps))


def _splice(body, old: ir.Stmt, new: tuple) -> tuple:
    """``body`` with the statement ``old`` (by identity, at any depth) replaced by ``new``."""
    out: list = []
    for s in body:
        if s is old:
            out += new
            continue
        changes = {a: _splice(getattr(s, a), old, new) for a in ("body", "orelse") if hasattr(s, a)}
        out.append(dataclasses.replace(s, **changes) if changes else s)
    return tuple(out)


def reads_at(e: ir.Expr, array: str, var: str) -> bool:
    """``e`` is ``array[var]`` (the loop variable, as an index or plainly)."""
    return isinstance(e, ir.Load) and e.array == array and e.index in ((ir.Index(ir.Var(var)),), (ir.Var(var),))


def _replace_loads(node, array: str, var: str, by: ir.Expr):
    """``node`` (a statement or expression) with every ``array[var]`` replaced by ``by``."""
    if isinstance(node, ir.Expr) and reads_at(node, array, var):
        return by
    if isinstance(node, (ir.Var, ir.Const)):
        return node
    changes = {}
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if isinstance(value, (ir.Expr, ir.Stmt)):
            changes[f.name] = _replace_loads(value, array, var, by)
        elif isinstance(value, tuple) and value and isinstance(value[0], (ir.Expr, ir.Stmt)):
            changes[f.name] = tuple(_replace_loads(v, array, var, by) for v in value)
    return dataclasses.replace(node, **changes) if changes else node
