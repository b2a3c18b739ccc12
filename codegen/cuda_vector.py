"""Vector loads of a thread's row: the values a row loop reads, ``n`` per 64- or 128-bit load.

:func:`codegen.cuda_schedule.planned` marks (``Mapping.vector``) the row loop of a
thread_per_row kernel and the values array it reads at its loop variable, when the
schedule chose ``vector = n`` from the values' item size. :func:`vectorised` rewrites the
spread loop so that the row loop runs, in the same order as before (a sum and a running
coordinate see the same sequence), as::

    lo = start; hi = stop
    first = min(hi, lo + ((-element_address(vals)) % n - lo) % n)
    for p in range(lo, first):            body                  # head: scalar loads
    for q in range(first, hi - n + 1, n):                       # whole vectors
        v = ldg<n>(vals, q)                                     # one load, vals[q] aligned
        p = q;         body with vals[p] -> v[0]
        ...
        p = q + n - 1; body with vals[p] -> v[n - 1]
    for p in range(first + (hi - first) // n * n, hi): body     # tail: scalar loads

``q`` starts where ``vals[q]`` is ``n``-element aligned in memory, however the buffer was
allocated or sliced, and ``q + n <= hi <= len(vals)``: no load reads past the row's end.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from . import loopir as ir


def vectorised(loop: ir.For, row: ir.For, array: str, n: int, fresh: Callable[[object, str], str]) -> ir.For:
    """``loop`` with its statement ``row`` (by identity, at any depth) run ``n`` values of
    ``array`` a load; ``fresh(key, base)`` names the new variables."""
    name = {k: fresh(("vector", k), f"{row.var}_{k}") for k in ("lo", "hi", "first", "q", "v")}
    var = {k: ir.Var(v) for k, v in name.items()}
    lead = ir.Bin("%", ir.Neg(ir.Call("element_address", (ir.Var(array),))), ir.Const(n))
    first = ir.Call("min", (var["hi"], ir.add(var["lo"], ir.Bin("%", ir.sub(lead, var["lo"]), ir.Const(n)))))
    whole = ir.mul(ir.Bin("//", ir.sub(var["hi"], var["first"]), ir.Const(n)), n)
    unrolled: list[ir.Stmt] = [ir.Assign(name["v"], ir.Call(f"ldg{n}", (ir.Var(array), var["q"])))]
    for k in range(n):
        element = ir.Load(name["v"], (ir.Const(k),))
        unrolled.append(ir.Assign(row.var, ir.add(var["q"], k)))
        unrolled += [_replace_loads(s, array, row.var, element) for s in row.body]
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
