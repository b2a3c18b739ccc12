"""Rebuild a traced model with compact feature tensors: the structural half of specialisation.

Every feature tensor of the new graph holds a subset ``K`` of its features
(all of them by default). The rules, given the :mod:`~ustc.torch.propagate_rules`
facts (``known``, ``unused``, ``needed = not known and not unused``):

* an ``nn.Linear`` computes only the rows ``K_out = needed`` (when at least
  ``min_share`` of its outputs can go) from the columns it gets; input
  features it does not get are known (their weights times their values are
  folded into the bias) or unused (their weights are 0 in every kept row).
  Where at least ``min_share`` of the columns it gets are ignored, its input
  is narrowed first (a gather);
* an element-wise op in one tensor works on its input's ``K`` (widened first
  when a needed feature is missing: random dropout of a known constant);
* ``a + b``, ``a * b``: both operands brought to ``K_a``, ``K_b`` or ``K_a ∪ K_b``, the
  cheapest that holds the needed features (a parameter is cheaper to gather
  than an activation to scatter);
* boundaries and the model's output get full-width tensors.

Bringing a tensor from ``K_src`` to ``K_dst`` (:class:`FeatureGather`,
:class:`FeatureScatter`) fills the features it lacks with their known values
(0 for unused ones, which nobody reads): the result is exact for every
consumer. The invariant: the features in ``K`` are computed exactly; those
outside are known or unused. A tensor an in-place op writes into while others
can see it (``pinned``) keeps all its features, so the write reaches them.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import fx, nn

from .propagate_ops import BINARY, LINEAR, UNARY, is_inplace
from .propagate_rules import Facts, dense_bias, dense_weight

MIN_SHARE = 1 / 16  # drop rows / gather columns only when this share of them goes: a gather or scatter costs a copy


class FeatureGather(nn.Module):
    """``x[..., index]``: the listed features of the last dimension."""

    def __init__(self, index: torch.Tensor):
        super().__init__()
        self.register_buffer("index", index)

    def forward(self, x):
        return x.index_select(-1, self.index)

    def extra_repr(self) -> str:
        return f"keep={self.index.numel()}"


class FeatureScatter(nn.Module):
    """A tensor of ``fill.numel()`` features along its last dimension: ``x`` at ``index``, ``fill`` elsewhere."""

    def __init__(self, index: torch.Tensor, fill: torch.Tensor):
        super().__init__()
        self.register_buffer("index", index)
        self.register_buffer("fill", fill)
        self.zero = bool((fill == 0).all())

    def forward(self, x):
        shape = (*x.shape[:-1], self.fill.numel())
        out = x.new_zeros(shape) if self.zero else self.fill.to(x.dtype).expand(shape).contiguous()
        return out.index_copy_(-1, self.index, x)

    def extra_repr(self) -> str:
        return f"{self.index.numel()} -> {self.fill.numel()}"


def compact_linear(module: nn.Linear, rows, cols, facts_in: Facts) -> nn.Linear:
    """The rows ``rows`` and columns ``cols`` (index tensors, None: all) of ``module`` as a new dense
    ``nn.Linear``; the known input features outside ``cols`` are folded into the bias."""
    w, b = dense_weight(module), dense_bias(module)
    width = w.shape[1]
    keep_rows = torch.arange(w.shape[0]) if rows is None else rows
    keep_cols = torch.arange(width) if cols is None else cols
    outside = torch.ones(width, dtype=torch.bool)
    outside[keep_cols] = False
    folded = outside & facts_in.known
    w_rows = w[keep_rows]
    bias = b[keep_rows] + w_rows[:, folded] @ facts_in.value[folded]
    dtype = module.weight.dtype
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")  # an empty layer (every output known) warns at init
        new = nn.Linear(len(keep_cols), len(keep_rows), bias=module.bias is not None or bool(bias.any()))
    device = module.weight.device
    new.weight = nn.Parameter(w_rows[:, keep_cols].to(device, dtype).contiguous(),
                              requires_grad=module.weight.requires_grad)
    if new.bias is not None:
        grad = module.bias is not None and module.bias.requires_grad
        new.bias = nn.Parameter(bias.to(device, dtype), requires_grad=grad)
    new.train(module.training)
    return new


@dataclass
class LayerPlan:
    """One rebuilt ``nn.Linear``: the graph node, the original module's name (``source``) and the new
    one's (``target``: the same, unless the module is called more than once), the kept output rows and
    input columns (index tensors; None: all) and the compact dense module."""

    node: str
    source: str
    target: str
    rows: torch.Tensor | None
    cols: torch.Tensor | None
    module: nn.Linear


def _indices(mask: torch.Tensor):
    """The True positions of ``mask``, or None when that is all of them."""
    return None if bool(mask.all()) else torch.nonzero(mask).flatten()


def _numel(shape) -> int:
    count = 1
    for n in shape:
        count *= n
    return count


def _full(kept, width: int) -> torch.Tensor:
    return torch.arange(width) if kept is None else kept


class Rewriter:
    """Builds the compact graph; :meth:`run` returns ``(GraphModule, [LayerPlan], conversions)``.
    ``seen``: the :class:`~ustc.torch.propagate_capture.Observed` run (shapes, dtypes, devices);
    ``pinned``: nodes kept at full width (an in-place op writes into them for others to see)."""

    def __init__(self, gm: fx.GraphModule, ops: dict, facts: dict, seen, min_share: float = MIN_SHARE,
                 pinned=frozenset()):
        self.gm, self.ops, self.facts, self.seen, self.pinned = gm, ops, facts, seen, pinned
        self.shapes = seen.shape
        self.min_share = min_share
        self.old_modules = dict(gm.named_modules())
        self.graph, self.root = fx.Graph(), {}
        self.env, self.kept, self.memo = {}, {}, {}
        self.plans, self.conversions = [], []

    def run(self) -> tuple:
        for node in self.gm.graph.nodes:
            op = self.ops.get(node.name)
            kind = op.kind if op is not None else None
            if kind == LINEAR:
                self._linear(node, op)
            elif kind == UNARY:
                self._unary(node, op)
            elif kind == BINARY:
                self._binary(node, op)
            else:
                self._boundary(node)
            if is_inplace(node, self.old_modules):  # a conversion made before it would be stale now
                self.memo = {k: v for k, v in self.memo.items() if k[0] not in node.args}
        gm = fx.GraphModule(self.root, self.graph, self.gm.__class__.__name__)
        gm.train(self.gm.training)
        return gm, self.plans, self.conversions

    # -- node kinds -----------------------------------------------------------------------------

    def _copy(self, node: fx.Node, replace: dict | None = None) -> fx.Node:
        replace = replace or {}
        new = self.graph.node_copy(node, lambda n: replace.get(n, self.env[n]))
        if node.op in ("call_module", "get_attr"):
            if node.target in self.root and self.root[node.target] is not self._fetch(node.target):
                new.target = f"ustc_{node.name}"  # the name holds a rebuilt layer: this call keeps the original
            self.root[new.target] = self._fetch(node.target)
        self.env[node] = new
        return new

    def _fetch(self, target: str):
        obj = self.gm
        for part in target.split("."):
            obj = getattr(obj, part)
        return obj

    def _boundary(self, node: fx.Node) -> None:
        replace = {a: self.convert(a, None) for a in node.all_input_nodes if self.kept.get(a.name) is not None}
        self._copy(node, replace)

    def _shrink(self, mask: torch.Tensor):
        """``_indices(mask)`` when at least ``min_share`` of the positions go, else None (keep all)."""
        gone = int((~mask).sum())
        return _indices(mask) if gone and gone >= self.min_share * mask.numel() else None

    def _linear(self, node: fx.Node, op) -> None:
        source = op.inputs[0]
        facts, facts_in = self.facts[node.name], self.facts[source.name]
        rows = None if node.name in self.pinned else self._shrink(facts.needed)
        w = dense_weight(self.old_modules[node.target])
        w = w if rows is None else w[rows]
        width = w.shape[1]
        got = _full(self.kept.get(source.name), width)
        read = torch.zeros(width, dtype=torch.bool)
        read[got] = True
        read &= (w != 0).any(0) & ~facts_in.known  # columns that still matter: nonzero, not folded
        cols = self.kept.get(source.name)
        narrowed = self._shrink(read[got])
        if narrowed is not None:
            cols = got[narrowed]
        new_in = self.convert(source, cols)
        module = compact_linear(self.old_modules[node.target], rows, cols, facts_in)
        target = node.target if node.target not in self.root else f"ustc_{node.name}"  # one module per call
        self.root[target] = module
        self.env[node] = self.graph.create_node("call_module", target, (new_in,), {}, name=node.name)
        self.kept[node.name] = rows
        self.plans.append(LayerPlan(node.name, node.target, target, rows, cols, module))

    def _unary(self, node: fx.Node, op) -> None:
        source = op.inputs[0]
        kept = self.kept.get(source.name)
        if kept is not None and node.name in self.pinned:
            kept = None
        elif kept is not None:
            have = torch.zeros(self.shapes[node.name][-1], dtype=torch.bool)
            have[kept] = True
            if bool((self.facts[node.name].needed & ~have).any()):
                kept = _indices(have | self.facts[node.name].needed)
        self.kept[node.name] = kept
        self._copy(node, {source: self.convert(source, kept)})

    def _binary(self, node: fx.Node, op) -> None:
        a, b = op.inputs
        kept = None if node.name in self.pinned else self._meeting_point(node, op.inputs)
        self.kept[node.name] = kept
        self._copy(node, {a: self.convert(a, kept), b: self.convert(b, kept)})

    def _meeting_point(self, node: fx.Node, inputs):
        """The features both operands are brought to: ``K_a``, ``K_b`` or their union, whichever holds
        the needed features and copies the fewest elements (a scatter counts twice: it also fills)."""
        width = self.shapes[node.name][-1]
        needed = self.facts[node.name].needed
        masks = {}
        for arg in inputs:
            mask = torch.zeros(width, dtype=torch.bool)
            mask[_full(self.kept.get(arg.name), width)] = True
            masks[arg] = mask
        union = torch.zeros(width, dtype=torch.bool)
        for mask in masks.values():
            union |= mask
        best = None
        for candidate in [*masks.values(), union]:
            if bool((needed & ~candidate).any()):
                continue
            cost = 0
            for arg, mask in masks.items():
                size = max(1, _numel(self.shapes[arg.name]))
                if not torch.equal(mask, candidate):
                    cost += size * (2 if bool((candidate & ~mask).any()) else 1)
            key = (cost, int(candidate.sum()))
            if best is None or key < best[0]:
                best = (key, candidate)
        return _indices(best[1])

    # -- conversions ----------------------------------------------------------------------------

    def convert(self, source: fx.Node, target) -> fx.Node:
        """The new graph's node holding ``source``'s features ``target`` (None: all of them)."""
        kept = self.kept.get(source.name)
        if kept is None and target is None or kept is not None and target is not None and torch.equal(kept, target):
            return self.env[source]
        key = (source, None if target is None else tuple(target.tolist()))
        if key not in self.memo:
            self.memo[key] = self._conversion(source, kept, target)
        return self.memo[key]

    def _conversion(self, source: fx.Node, kept, target) -> fx.Node:
        width = self.shapes[source.name][-1]
        src, dst = _full(kept, width), _full(target, width)
        have = torch.zeros(width, dtype=torch.bool)
        have[src] = True
        node = self.env[source]
        if bool(have[dst].all()):  # a gather: every wanted feature is there
            return self._insert(FeatureGather(torch.searchsorted(src, dst)), node, "gather", source, len(src), len(dst))
        facts = self.facts[source.name]
        missing = dst[~have[dst]]
        if not bool((facts.known[missing] | facts.unused[missing]).all()):
            raise AssertionError(f"propagate: features of {source.name} are needed but neither computed nor known")
        want = torch.zeros(width, dtype=torch.bool)
        want[dst] = True
        if not bool(want[src].all()):  # drop what the target lacks first
            node = self._insert(FeatureGather(torch.nonzero(want[src]).flatten()), node, "gather", source,
                                len(src), int(want[src].sum()))
            src = src[want[src]]
        fill = torch.where(facts.known[dst], facts.value[dst], 0.0).to(self.seen.dtype[source.name])
        return self._insert(FeatureScatter(torch.searchsorted(dst, src), fill), node, "scatter", source,
                            len(src), len(dst))

    def _insert(self, module: nn.Module, node: fx.Node, kind: str, source: fx.Node, n_in: int, n_out: int):
        name = f"ustc_{kind}_{len(self.conversions)}"
        self.root[name] = module.to(self.seen.device[source.name])
        self.conversions.append(f"{kind} after {source.name}: {n_in} -> {n_out} features")
        return self.graph.call_module(name, (node,))
