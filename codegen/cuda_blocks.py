"""Block shapes as compile-time constants on the cuda target.

A level whose extent the format fixes whatever the tensor's shape (``i mod r``: the
in-block levels of BSR / BSC, the in-group level of n:m) still reaches a generated
kernel as a size parameter (``A_lvl3_size``), read at run time. On the cuda target the
host (``ustc.ops.cuda_host``, which knows the formats; this module never sees one)
names those sizes and :func:`constant_sizes` writes their values into the loop IR
before the schedules are chosen. The module is then specialised per block shape, as
the CPU's BSR SpGEMM is (``BSR(2, 2)`` and ``BSR(4, 4)`` are different formats, so
different modules already): block loops run a constant number of times and a block
row sits at a constant stride (``A_p3 = A_p2 * 4 + v_j_mod4``), which is what lets the
schedule read it with one vector load (``cuda_schedule.block_row``). The parameter
stays in the signature (the launch passes it, unread).
"""

from __future__ import annotations

import dataclasses

from . import loopir as ir
from .roles import Kind


def constant_sizes(module: ir.Module, sizes: dict[str, dict[tuple[str, int], int]]) -> ir.Module:
    """``module`` with each level-size parameter of a function replaced, in its body, by the
    constant ``sizes[function name][(tensor, level)]`` where there is one; ``module`` itself
    when there is none."""
    if not any(sizes.values()):
        return module
    functions = []
    for fn in module.functions:
        fixed = sizes.get(fn.name, {})
        by = {p.name: ir.Const(int(fixed[(p.role.tensor, p.role.level)])) for p in fn.params
              if p.role.kind is Kind.SIZE and (p.role.tensor, p.role.level) in fixed}
        functions.append(dataclasses.replace(fn, body=tuple(_substitute(s, by) for s in fn.body)) if by else fn)
    return dataclasses.replace(module, functions=tuple(functions))


def _substitute(node, by: dict[str, ir.Const]):
    """``node`` (a statement or expression) with every variable named in ``by`` replaced."""
    if isinstance(node, ir.Var):
        return by.get(node.name, node)
    if isinstance(node, ir.Const):
        return node
    changes = {}
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if isinstance(value, (ir.Expr, ir.Stmt)):
            changes[f.name] = _substitute(value, by)
        elif isinstance(value, tuple) and any(isinstance(v, (ir.Expr, ir.Stmt)) for v in value):
            changes[f.name] = tuple(_substitute(v, by) if isinstance(v, (ir.Expr, ir.Stmt)) else v for v in value)
    return dataclasses.replace(node, **changes) if changes else node
