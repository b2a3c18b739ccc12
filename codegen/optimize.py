"""Loop-IR rewrites that make generated CPU kernels fast; each keeps the meaning exactly.

* :func:`unroll_reductions` — an innermost loop whose only effect is ``acc += e``
  (or another fold: ``acc = min(acc, e)``) runs two iterations per step into two
  accumulators when it has at least :data:`UNROLL_MIN` iterations (the add chain, not
  memory, limits a long CSR row; measured +7–23%); a shorter one runs as it is (rows of
  7 entries, the stencil's: 1.32 ms unrolled against 1.18–1.24 ms on 216,000 rows).
* :func:`tile_parallel` — a parallel loop nested in sequential loops (DIA: rows
  inside the diagonal loop) becomes a parallel loop over row tiles outside them:
  each tile walks the diagonals and its own rows, so the output tile stays in
  cache instead of being re-read once per diagonal (measured 1.4–1.5×). Legal
  because the parallel loop's iterations write disjoint elements and the loops
  around it only compute local values.
* :func:`overwrite_stores` — when loops over the output's whole index space store
  each element once, unconditionally, the store assigns instead of adding: the
  host skips zero-filling the output and the kernel skips reading it back (CSR
  SpMV: two of the five passes over ``y``).
* :func:`fuse_epilog` — under the same condition (each element stored once by loops
  over the whole index space), an epilog is applied in that store
  (``y[i] = h(y[i] + acc)``) instead of in a pass of its own over the output.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from . import loopir as ir
from .names import FreshNames

TILE = 16384
UNROLL_MIN = 16  # reductions over fewer iterations keep one accumulator


@dataclass(frozen=True)
class Tuning:
    """Per-target choices of these rewrites (the lowering itself is shared by all targets).

    ``unroll``: two-accumulator reductions; ``tile``: rows per hoisted tile of a nested parallel
    loop (1: one row per iteration, as a GPU thread per row wants); ``grain``: nonzeros per chunk of a
    sorted level with repeats (0: a fixed 256 chunks, enough CPU threads); ``overwrite``: allow
    :func:`overwrite_stores`; ``ordered_writes``: write sparse outputs in their own format by in-order
    insertion (:mod:`codegen.writer`) where the loop order allows; ``workspaces``: reduce into
    a sparse output through a kernel-local dense row (:mod:`codegen.workspace`); ``balance``: split a dense
    output's parallel row loop into one chunk of about equal work per thread where the rows' cumulative
    work is stored (:func:`codegen.workspace.balanced_rows`; a GPU schedules rows itself); ``gpu_writer``: the
    writer's kernel runs on a GPU (:mod:`codegen.writer`, "On the CUDA target"): only a writer whose chunks spread
    over threads (``split``), with no kernel-local arrays or sorts (no workspace level) and no serial pass after
    the chunks (no level that collects), and compressed rows (CSR, CSC) written by it too; any other sparse
    output takes the coordinate-list path."""

    unroll: bool = True
    tile: int = TILE
    grain: int = 0
    overwrite: bool = True
    ordered_writes: bool = True
    workspaces: bool = True
    balance: bool = True
    gpu_writer: bool = False


CPU = Tuning()
# GPU: zero-filling is a device memset, and merge-path rows split between threads must add
CUDA = Tuning(unroll=False, tile=1, grain=32, overwrite=False, ordered_writes=True, workspaces=False,
              balance=False, gpu_writer=True)


def unroll_reductions(body, acc: str, zero, names: FreshNames, op: str = "+") -> list[ir.Stmt]:
    """``body`` with innermost reduction loops into ``acc`` (folded with ``op``, starting at
    ``zero``, a constant expression) split over two accumulators."""
    out = []
    for s in body:
        if isinstance(s, ir.For) and not s.parallel and _reduction_only(s.body, acc, op):
            out += _unrolled(s, acc, zero, names, op)
        elif isinstance(s, (ir.For, ir.While)):
            out.append(replace(s, body=tuple(unroll_reductions(s.body, acc, zero, names, op))))
        elif isinstance(s, ir.If):
            out.append(replace(s, body=tuple(unroll_reductions(s.body, acc, zero, names, op)),
                               orelse=tuple(unroll_reductions(s.orelse, acc, zero, names, op))))
        else:
            out.append(s)
    return out


def _reduction_only(body, acc: str, op: str = "+") -> bool:
    """Straight-line body: local assignments, and exactly one ``acc op= ...`` at the end."""
    if not body or not (isinstance(body[-1], ir.Assign) and body[-1].name == acc and body[-1].op == op):
        return False
    return all(isinstance(s, ir.Assign) and s.name != acc for s in body[:-1])


def _unrolled(loop: ir.For, acc: str, zero, names: FreshNames, op: str = "+") -> list[ir.Stmt]:
    v = loop.var
    start, stop, mid = (names(("unroll", v, role), f"{v}_{role}") for role in ("start", "stop", "mid"))
    second, even = names(("unroll_acc", acc), f"{acc}_1"), names(("unroll", v, "even"), f"{v}_2")
    twin = tuple(replace(s, name=second) if isinstance(s, ir.Assign) and s.name == acc else s for s in loop.body)
    pair = (ir.Assign(v, ir.Var(even)),) + loop.body + (ir.Assign(v, ir.add(ir.Var(even), 1)),) + twin
    span = ir.Bin("&", ir.sub(ir.Var(stop), ir.Var(start)), ir.Const(-2))
    pairs = (ir.Assign(mid, ir.add(ir.Var(start), span)), ir.Assign(second, zero),
             ir.For(even, ir.Var(start), ir.Var(mid), pair, step=2),
             ir.For(v, ir.Var(mid), ir.Var(stop), loop.body),
             ir.Assign(acc, ir.Var(second), op))
    short = (ir.For(v, ir.Var(start), ir.Var(stop), loop.body),)
    return [ir.Assign(start, loop.start), ir.Assign(stop, loop.stop),
            ir.If(ir.Bin(">=", ir.sub(ir.Var(stop), ir.Var(start)), ir.Const(UNROLL_MIN)), pairs, short)]


def tile_parallel(body, tile: int, names: FreshNames) -> list[ir.Stmt]:
    """Hoist tiles of a nested parallel loop above the sequential loops that enclose it.

    Assignments just before the outer loop to variables the loop updates (a delta level's
    running coordinate) start each walk of it, so they move into every tile."""
    out: list[ir.Stmt] = []
    for s in body:
        inner = _nested_parallel(s) if isinstance(s, ir.For) and not s.parallel else None
        if inner is None or _stores_follow_outer(s, inner):
            out.append(s)
            continue
        written = {w.name for w in ir.walk(s.body) if isinstance(w, ir.Assign)}
        setup: list[ir.Stmt] = []
        while out and isinstance(out[-1], ir.Assign) and out[-1].name in written:
            setup.insert(0, out.pop())
        out.append(_tiled(s, inner, tile, names, tuple(setup)))
    return out


def _nested_parallel(loop: ir.For):
    """The parallel loop reached through pure sequential loops, each ending in the next loop."""
    *pre, last = loop.body or (None,)
    if last is None or not all(isinstance(s, ir.Assign) for s in pre) or not isinstance(last, ir.For):
        return None
    if last.parallel:
        return last if last.full is not None else None
    return _nested_parallel(last)


def _stores_follow_outer(outer: ir.For, target: ir.For) -> bool:
    """Whether ``target`` stores at subscripts computed from the enclosing loops' variables
    (DIAJ: ``y[j - d]`` under the diagonal loop ``d``): its iterations are disjoint within one
    walk of those loops but not across them, so tiles hoisted above them would race."""
    outer_names: set[str] = set()
    loop = outer
    while loop is not target:
        outer_names.add(loop.var)
        outer_names.update(a.name for a in loop.body[:-1])
        loop = loop.body[-1]
    depends = set(outer_names)
    for s in ir.walk(target.body):
        if isinstance(s, ir.Assign) and ir.variables(s.value) & depends:
            depends.add(s.name)
        elif isinstance(s, ir.Store) and any(ir.variables(i) & depends for i in s.index):
            return True
    return False


def _tiled(outer: ir.For, target: ir.For, tile: int, names: FreshNames,
           setup: tuple[ir.Stmt, ...] = ()) -> ir.For:
    lo, hi = target.full
    t, t_lo, t_hi = (names(("tile", target.var, role), f"{target.var}_{role}") for role in ("tile", "tlo", "thi"))
    span = ir.sub(hi, lo)
    ntiles = span if tile == 1 else ir.Bin("//", ir.add(span, tile - 1), ir.Const(tile))
    local = replace(target, start=ir.Call("max", (ir.Var(t_lo), target.start)),
                    stop=ir.Call("min", (ir.Var(t_hi), target.stop)), parallel=False, full=None)
    body = (ir.Assign(t_lo, ir.add(lo, ir.mul(ir.Var(t), tile))),
            ir.Assign(t_hi, ir.Call("min", (ir.add(ir.Var(t_lo), tile), hi))),
            *setup, _swap(outer, target, local))
    return ir.For(t, ir.Const(0), ntiles, body, parallel=True)


def _swap(loop: ir.For, old: ir.For, new: ir.For) -> ir.For:
    last = loop.body[-1]
    inner = new if last is old else _swap(last, old, new)
    return replace(loop, body=loop.body[:-1] + (inner,))


def overwrite_stores(body, output: str, indices: tuple[str, ...], extents: dict[str, str]):
    """``(body, True)`` with the output's store turned into ``=`` when ``body`` is
    ``[assigns..., for i0 in range(n_i0): [assigns..., for i1 in range(n_i1): ... [..., out[i0, i1] += v]]]``
    — the loops over the output's indices in order, each over its whole extent
    (``extents[index]`` names the extent parameter), their bodies straight-line around the
    next loop, and the single store to ``output`` at the top of the innermost body; else
    ``(body, False)`` unchanged. Only for statements that overwrite (``=``), whose output
    the right-hand side does not read (the caller checks both)."""
    if not indices:
        return body, False
    found = _single_store(body, output, indices, extents, lambda store: replace(store, accumulate=False))
    return (list(found), True) if found is not None else (body, False)


def fuse_epilog(body, output: str, indices: tuple[str, ...], extents: dict[str, str], epilog: str):
    """``(body, True)`` with the output's single store applying ``epilog`` (an extern's name) to
    the element it leaves — ``y[i] = h(y[i] op v)`` for a folding store, ``y[i] = h(v)`` for an
    overwriting one — when ``body`` stores each element once as :func:`overwrite_stores`
    requires (the loops over the output's indices over their whole extents, the store
    unconditional at the top of the innermost body, the output read nowhere else); else
    ``(body, False)``: the epilog then needs a pass of its own after the kernel."""

    def fused(store: ir.Store) -> ir.Store:
        value = store.value
        if store.accumulate:
            value = fold(store.op, ir.Load(store.array, store.index), value)
        return replace(store, value=ir.Call(epilog, (value,)), accumulate=False)

    found = _single_store(body, output, indices, extents, fused)
    return (list(found), True) if found is not None else (body, False)


def fold(op: str, a: ir.Expr, b: ir.Expr) -> ir.Expr:
    """``a op b`` for a fold ``op`` (``+ * | &`` operators; ``min``, ``max``, externs calls)."""
    return ir.Bin(op, a, b) if op in ir.INPLACE else ir.Call(op, (a, b))


def _single_store(body, output, indices, extents, rewrite):
    if _touches(body, output) != 1:
        return None
    store = next(s for s in ir.walk(body) if isinstance(s, ir.Store) and s.array == output)
    if store.index != (tuple(ir.Index(ir.Var(i)) for i in indices) or (ir.Const(0),)):
        return None
    return _overwrite(tuple(body), output, indices, extents, rewrite)


def _overwrite(body, output, indices, extents, rewrite):
    loops = [k for k, s in enumerate(body) if isinstance(s, ir.For)]
    if not indices:
        hits = [k for k, s in enumerate(body) if isinstance(s, ir.Store) and s.array == output]
        if len(hits) != 1:  # the store is nested in a condition or a loop
            return None
        return body[:hits[0]] + (rewrite(body[hits[0]]),) + body[hits[0] + 1:]
    if len(loops) != 1 or not all(isinstance(s, (ir.Assign, ir.Comment)) for k, s in enumerate(body)
                                  if k != loops[0]):
        return None
    loop = body[loops[0]]
    full = loop.start == ir.Const(0) and loop.stop == ir.Var(extents.get(indices[0], "")) and loop.step == 1
    if loop.var != indices[0] or not full:
        return None
    inner = _overwrite(loop.body, output, indices[1:], extents, rewrite)
    if inner is None:
        return None
    return body[:loops[0]] + (replace(loop, body=inner),) + body[loops[0] + 1:]


def _touches(body, output: str) -> int:
    """Stores to ``output`` anywhere in ``body`` (reads of it make the count meaningless: -1)."""
    stores = sum(isinstance(s, ir.Store) and s.array == output for s in ir.walk(body))
    return stores if output not in _loaded(body) else -1


def _loaded(body) -> set[str]:
    """The arrays loaded anywhere in ``body``."""
    return {n.array for s in ir.walk(body) for e in ir.children(s) for n in ir.nodes(e) if isinstance(n, ir.Load)}
