"""Iteration graph: which loop variable must be walked before which.

Nodes are the loop variables of a :class:`~codegen.space.Space`. Each stored
operand that has an iterated level adds edges along its level order (its
level ``k + 1`` needs the position found at level ``k``); operands whose levels
are all random-access add none. A derived index contributes edges from the
loop variables it is computed from.

:func:`loop_order` picks a topological order by priority: variables an operand
locates (dense levels, the natural outer loops and the parallel ones) first,
then iterated ones, then variables only dense arrays use; within a class,
output indices before reductions (so sums stay in registers), then order of
appearance. A cycle (``A[i, j] * B[i, j]`` with CSR ``A`` and CSC ``B``) raises
:class:`~codegen.space.Replan` for the later operand on the cycle, asking for
its levels in an order compatible with the rest (with the later operands of any
further cycles set aside too: they are replanned in turn).
"""

from __future__ import annotations

import heapq

import networkx as nx

from ustc.format import expr as fx
from ustc.format.ir import TensorFormat
from ustc.format.ir_types import Level

from . import notation as nt
from .space import Replan, Space, coiterable, csf
from .writer import output_order

OUTPUT_SLOT = -1  # the slot soft edges of the output's level order are recorded under


def build(space: Space) -> nx.DiGraph:
    """Hard edges into every iterated level from the variables of the levels above it
    (its segment needs their positions); soft edges into random-access levels, kept
    only where they close no cycle (they only steer the order: outer blocks, DIA
    diagonals outside rows), preceded by soft edges along the output's levels."""
    graph = nx.DiGraph()
    graph.add_nodes_from(space.loopvars)
    soft = []
    for slot, refs in space.levels.items():
        if not any(r.iterate for r in refs):
            continue
        for k, ref in enumerate(refs):
            above = {u for a in refs[:k] for u in space.nodes_of(a.var)}
            for w in space.nodes_of(ref.var):
                for u in above:
                    if ref.iterate:
                        _edge(graph, u, w, slot)
                    elif u != w:
                        soft.append((u, w, slot))
    copy = isinstance(space.statement.rhs, nt.Access)
    for u, w in _output_order(space):  # a conversion: the target's order decides; else where nothing does
        if not graph.has_edge(u, w) and (copy or not nx.has_path(graph, w, u)):
            _edge(graph, u, w, OUTPUT_SLOT)
    for u, w, slot in soft:
        if graph.has_edge(u, w) or not nx.has_path(graph, w, u):
            _edge(graph, u, w, slot)
    return graph


def _output_order(space: Space) -> list[tuple[str, str]]:
    """Edges along the levels of a sparse output that can be written in order, ahead of the
    operands' soft edges: where no stored level decides, walk in the order the output is kept.
    For a copy (``B[...] = A[...]``, a conversion) they are hard: a source walked in the other
    order is converted first (a cycle names it), since a walk in the wrong order cannot write."""
    lhs = space.statement.lhs
    order = output_order(space.formats.get(lhs.tensor), lhs.indices)
    return [(u, w) for u, w in zip(order, order[1:]) if u in space.loopvars and w in space.loopvars]


def _edge(graph: nx.DiGraph, u: str, w: str, slot: int) -> None:
    graph.add_edge(u, w)
    graph.edges[u, w].setdefault("slots", set()).add(slot)


def loop_order(space: Space) -> list[str]:
    graph = build(space)
    cycle = _cycle(graph)
    if cycle is None:
        return _prioritised(graph, space)
    slot = _latest(graph, cycle)
    access = space.accesses[slot]
    rest = _without(graph, slot)
    while (more := _cycle(rest)) is not None:  # several operands in conflict: each is replanned in turn
        rest = _without(rest, _latest(rest, more))
    fmt = space.formats[access.tensor]
    raise Replan(access.tensor, reordered(fmt, access.indices, _prioritised(rest, space)),
                 f"its level order conflicts with another operand's (cycle {' -> '.join(u for u, *_ in cycle)})",
                 slot)


def _cycle(graph: nx.DiGraph):
    try:
        return nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        return None


def _latest(graph: nx.DiGraph, cycle) -> int:
    """The operand to convert on ``cycle``: the last (in reading order) of those whose edges
    alone close it, so that converting it breaks the cycle."""
    edge_slots = [graph.edges[u, w]["slots"] for u, w, *_ in cycle]
    sole = [next(iter(slots)) for slots in edge_slots if len(slots) == 1]
    return max(sole) if sole else max(set().union(*edge_slots))


def _without(graph: nx.DiGraph, slot: int) -> nx.DiGraph:
    """``graph`` without the edges that only ``slot`` adds."""
    rest = nx.DiGraph()
    rest.add_nodes_from(graph)
    for u, w, data in graph.edges(data=True):
        slots = data["slots"] - {slot}
        if slots:
            rest.add_edge(u, w, slots=slots)
    return rest


def _prioritised(graph: nx.DiGraph, space: Space) -> list[str]:
    outputs = set(space.statement.lhs.indices)
    appearance = {v: k for k, v in enumerate(space.statement.indices)}
    kinds: dict[str, int] = {}
    for refs in space.levels.values():
        for r in refs:
            kinds[r.var] = max(kinds.get(r.var, 0), 1 if r.iterate else 0)

    def key(v: str):
        owners = [space.derived[d].owner for d in space.derived if v in space.derived[d].deps]
        out = v in outputs or any(d in outputs for d in space.derived if v in space.derived[d].deps)
        return (kinds.get(v, 2), 0 if out else 1, appearance.get(v, len(appearance) + min(owners, default=0)), v)

    indegree = {v: graph.in_degree(v) for v in graph}
    ready = [(key(v), v) for v, d in indegree.items() if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, v = heapq.heappop(ready)
        order.append(v)
        for w in graph.successors(v):
            indegree[w] -= 1
            if indegree[w] == 0:
                heapq.heappush(ready, (key(w), w))
    return order


def reordered(fmt: TensorFormat, indices: tuple[str, ...], order: list[str]) -> TensorFormat:
    """``fmt`` with its levels walking the dimensions in loop order ``order``.

    A format whose levels are plain dimensions keeps its sequence of level
    types (CSC becomes CSR) where the result holds every pattern and can be
    co-iterated; any other becomes CSF in that order. (``(j : compressed, i :
    singleton)`` turned into ``(i : compressed, j : singleton)`` could not hold
    two entries of one row.)
    """
    rank = {v: k for k, v in enumerate(order)}
    dims = sorted(fmt.dims, key=lambda d: rank.get(indices[fmt.dims.index(d)], len(rank)))
    if all(isinstance(lv.expr, fx.Dimension) for lv in fmt.levels) and fmt.nlevels == fmt.ndim:
        levels = tuple(Level(d, lv.type) for d, lv in zip(dims, fmt.levels))
        try:
            out = TensorFormat(fmt.dims, levels, fmt.pos_width, fmt.crd_width)
        except Exception:  # noqa: BLE001 - the type sequence does not fit this order
            out = None
        if out is not None and out.holds_any_pattern and coiterable(out):
            return out
    return csf(fmt, [d.name for d in dims])
