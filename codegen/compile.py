"""The compiler driver: a program and its operands' formats → a kernel module.

``compile_program`` runs the stages for every statement — level-space rewrite
(``space``), iteration graph and loop order (``graph``), lowering with merge
lattices (``lower``) — retrying with a converted operand whenever a stage
raises :class:`~codegen.space.Replan`. The result is a loop-IR
:class:`~codegen.loopir.Module` whose ``meta["plan"]`` tells the host, per
statement, which function to call, what each parameter is, and which operands
to convert first (a :class:`~codegen.plans.StatementPlan`); emitters turn the module into source text.

User functions (prologs, epilogs, semiring operators) become the module's
externs. A dense output's epilog is fused into its store where each element is
stored once (``optimize.fuse_epilog``); otherwise the statement gets a second
function ``<kernel>_epilog(vals)`` that applies it to every element of the
output's flat array, which the host runs after the kernel (``plan.epilog``).
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from dataclasses import dataclass

import numpy as np

from ustc.errors import ConversionWarning, KernelError, UnsupportedOperation
from ustc.format.ir import TensorFormat

from . import loopir as ir
from . import notation as nt
from . import optimize
from . import workspace
from .graph import loop_order
from .lower import NARROW_FLOATS, Lowering, Output
from .names import buffer_name
from .plans import StatementPlan
from .roles import Kind, Role
from .space import Replan, Space

log = logging.getLogger("ustc.codegen")

MAX_REPLANS = 8


@dataclass(frozen=True)
class Operand:
    """What the compiler knows about one tensor: its format (None: a dense array), rank, dtype."""

    name: str
    format: TensorFormat | None
    ndim: int
    dtype: str


def compile_program(program: nt.Program, operands: dict[str, Operand], header: tuple[str, ...] = (),
                    tuning: optimize.Tuning = optimize.CPU) -> ir.Module:
    functions, plans, externs = [], [], {}
    for k, statement in enumerate(program.statements):
        fn, plan, extra, used = compile_statement(statement, operands, f"kernel_{k}", tuning)
        functions += [fn, *extra]
        plans.append(plan)
        externs.update({e.name: e for e in used})
    return ir.Module(tuple(header), tuple(functions), {"plan": plans}, tuple(externs.values()))


def compile_statement(statement: nt.Statement, operands: dict[str, Operand], name: str,
                      tuning: optimize.Tuning = optimize.CPU):
    """``(function, plan, extra functions, externs)`` of one statement (module docstring)."""
    stmt = dataclasses.replace(statement, rhs=nt.number_accesses(statement.rhs))
    formats = {t: operands[t].format for t in operands}
    converts: dict[str, str] = {}
    aliases: dict[str, str] = {}
    out = operands[stmt.lhs.tensor]
    output = Output(out.name, out.format is not None, np.dtype(out.dtype), out.format)
    narrow = frozenset(t for t, o in operands.items() if str(o.dtype) in NARROW_FLOATS)
    for _ in range(MAX_REPLANS):
        try:
            space = Space(stmt, formats)
            order = loop_order(space)
            lowering = Lowering(space, order, output, name, tuning, narrow)
            body = lowering.body()
            break
        except Replan as exc:
            stmt, formats = _apply(exc, stmt, formats, converts, aliases)
    else:  # pragma: no cover - each replan removes a conflict
        raise UnsupportedOperation(f"could not find a loop order for {statement}")
    params = tuple(p for p in _candidates(stmt, formats, operands, aliases, output, lowering.writer)
                   if p.name in _names(body))
    _check_clashes(stmt, params)
    overwrites = False
    if tuning.overwrite and not output.sparse and not stmt.accumulate and stmt.lhs.tensor not in {a.tensor for a in stmt.rhs.accesses()}:
        extents = {p.role.index: p.name for p in params if p.role.kind is Kind.EXTENT}
        body, overwrites = optimize.overwrite_stores(body, output.tensor, stmt.lhs.indices, extents)
    extra: list[ir.Function] = []
    epilog = None
    if stmt.epilog is not None and not output.sparse:
        extents = {p.role.index: p.name for p in params if p.role.kind is Kind.EXTENT}
        h = lowering.extern(stmt.epilog)
        body, fused = optimize.fuse_epilog(body, output.tensor, stmt.lhs.indices, extents, h)
        epilog = "fused"
        if not fused:
            epilog = f"{name}_epilog"
            extra.append(epilog_function(epilog, h, str(statement)))
    if lowering.balance is not None:  # after the rewrites above, which read the plain row loop
        body = workspace.balanced_rows(body, lowering.balance, lowering.names)
        params = tuple(p for p in _candidates(stmt, formats, operands, aliases, output, lowering.writer)
                       if p.name in _names(body))
    fn = ir.Function(name, params, tuple(body), doc=str(statement))
    plan = StatementPlan(
        function=name, params=tuple(p.role for p in params), convert=converts, alias=aliases, order=order,
        sparse_output=output.sparse, rows=lowering.rows, statement=str(statement), accumulate=statement.accumulate,
        overwrites=overwrites, writer=lowering.writer.passes if lowering.writer is not None else 0,
        workspace=lowering.ws.index if lowering.ws is not None else None,
        split=lowering.writer is not None and lowering.writer.split,  # the writer's chunks run in parallel
        semiring=None if stmt.semiring.is_plus_times else stmt.semiring.name,
        # "fused" (in the kernel's store or insert), or the function to run after it
        epilog=None if stmt.epilog is None else
        "fused" if output.sparse and lowering.writer is not None else epilog or "host")
    return fn, plan, extra, tuple(lowering.externs.values())


def epilog_function(name: str, epilog: str, statement: str) -> ir.Function:
    """``vals[e] = epilog(vals[e])`` for every element of a flat output array, in parallel."""
    e, n = "e", "n_e"
    store = ir.Store("vals", (ir.Index(ir.Var(e)),), ir.Call(epilog, (ir.Load("vals", (ir.Index(ir.Var(e)),)),)))
    body = (ir.Assign(n, ir.Call("len", (ir.Var("vals"),))), ir.For(e, ir.Const(0), ir.Var(n), (store,), parallel=True))
    return ir.Function(name, (ir.Param("vals", Role(Kind.OUT_FLAT)),), body, doc=f"epilog of {statement}")


def _apply(exc: Replan, stmt, formats, converts, aliases):
    """Convert the operand named by ``exc`` (an alias of it when it is read more than once)."""
    tensor = exc.tensor
    reads = [a for a in stmt.rhs.accesses() if a.tensor == tensor]
    if len(reads) > 1 and exc.slot is not None:
        alias = f"{aliases.get(tensor, tensor)}_{exc.slot}"
        aliases[alias] = aliases.get(tensor, tensor)
        stmt = dataclasses.replace(stmt, rhs=_rename(stmt.rhs, exc.slot, alias))
        tensor = alias
    formats = dict(formats)
    formats[tensor] = exc.target
    converts[tensor] = str(exc.target)
    message = f"ustc converts operand '{aliases.get(tensor, tensor)}' to {exc.target} ({exc.reason})"
    warnings.warn(message, ConversionWarning, stacklevel=4)
    log.info(message)
    return stmt, formats


def _rename(e: nt.Expr, slot: int, name: str) -> nt.Expr:
    return nt.map_accesses(e, lambda a: nt.Access(name, a.indices, a.loc, a.slot) if a.slot == slot else a)


def _candidates(stmt, formats, operands, aliases, output, writer=None):
    """Every parameter a kernel for ``stmt`` could use, in a stable order."""
    out = stmt.lhs.tensor
    if writer is not None:
        yield ir.Param("emit", Role(Kind.EMIT))
        yield from writer.params
    elif output.sparse:
        yield ir.Param("emit", Role(Kind.EMIT))
        for d in range(len(stmt.lhs.indices)):
            yield ir.Param(f"{out}_crd{d}", Role(Kind.OUT_CRD, out, dim=d))
        yield ir.Param(f"{out}_vals", Role(Kind.OUT_VALS, out))
        yield ir.Param(f"{out}_offsets", Role(Kind.OUT_OFFSETS, out))
    else:
        yield ir.Param(out, Role(Kind.ARRAY, out))
    seen = {out}
    for access in stmt.rhs.accesses():
        t = access.tensor
        if t in seen:
            continue
        seen.add(t)
        fmt = formats.get(t)
        if fmt is None:
            yield ir.Param(t, Role(Kind.ARRAY, aliases.get(t, t)))
            continue
        for k, level in enumerate(fmt.levels):
            for buf in level.type.buffers:
                yield ir.Param(buffer_name(t, buf, k), Role.of(buf, t, k))
            yield ir.Param(buffer_name(t, "size", k), Role(Kind.SIZE, t, k))
            yield ir.Param(buffer_name(t, "lo", k), Role(Kind.LO, t, k))
        yield ir.Param(f"{t}_vals", Role(Kind.VALS, t))
    for index in stmt.indices:
        yield ir.Param(f"n_{index}", Role(Kind.EXTENT, index=index))
    for name in stmt.rhs.scalars():
        yield ir.Param(name, Role(Kind.SCALAR, name=name))
    yield ir.Param(workspace.THREADS, Role(Kind.THREADS))


def _check_clashes(stmt: nt.Statement, params) -> None:
    """Parameter names are built from tensor and index names (``A_lvl1_pos``, ``n_i``); a user name
    that spells one of another role (an index ``n_i``, a tensor ``A_vals``) would alias two
    arguments. Refuse it, naming both, rather than compute with the wrong one."""
    user = {i: f"the index '{i}'" for i in stmt.indices} | {s: f"the scalar '{s}'" for s in stmt.rhs.scalars()}
    roles: dict[str, Role] = {}
    for p in params:
        if p.name in roles:
            if roles[p.name] != p.role:
                raise KernelError(f"the name '{p.name}' is both {roles[p.name].describe()} and {p.role.describe()} "
                                  f"in {stmt}; rename the tensor or index")
        elif p.name in user and p.role.kind not in (Kind.EXTENT, Kind.SCALAR):
            raise KernelError(f"the name '{p.name}' is both {user[p.name]} and {p.role.describe()} "
                              f"in {stmt}; rename the tensor or index")
        roles[p.name] = p.role


def _names(body) -> set[str]:
    """The variables and arrays ``body`` reads or stores into (which parameters it needs)."""
    names: set[str] = set()
    for s in ir.walk(body):
        if isinstance(s, ir.Store):
            names.add(s.array)
        for child in ir.children(s):
            names.update(n.name if isinstance(n, ir.Var) else n.array
                         for n in ir.nodes(child) if isinstance(n, (ir.Var, ir.Load)))
    return names
