"""Propagation of feature sparsity through a traced model: constants forward, unused features backward.

Per feature tensor (a node; its features are its last dimension) the analysis
keeps three vectors: ``known`` (bool: the feature has one value for every
input), ``value`` (that value, float64) and ``unused`` (bool: no consumer
reads the feature).

Forward, in graph order (:func:`forward`):

* ``nn.Linear``: output ``j`` is known when every nonzero weight of row ``j``
  meets a known input; its value is ``bias[j] + sum(W[j, f] * value[f])``.
  A row of zeros with a zero bias is a dead feature;
* element-wise ops in one tensor (ReLU, GELU, a number added, ...): the op
  evaluated on the known values (a dead feature stays dead where ``f(0) = 0``;
  sigmoid makes it 0.5, still known); random dropout and products with factors
  only known at run time keep the zeros only;
* ``a + b``, ``a - b``: known where both are; ``a * b``: also 0 where either is 0;
* boundaries (LayerNorm, softmax, reshapes, opaque modules): nothing known.

Backward, in reverse graph order (:func:`backward`): a feature is unused when
every consumer ignores it: an ``nn.Linear`` ignores input ``f`` when column
``f`` of its weight is 0 in every row that is still needed (a row is needed
when its output is neither known nor unused); element-wise ops pass their
output's unused features to their inputs (a product also ignores ``a``'s
feature where ``b``'s is 0); boundaries and the model's output use everything.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import fx

from .propagate_ops import BINARY, LINEAR, UNARY, Op, evaluate
from .subclass import TorchUST


@dataclass
class Facts:
    """The analysis of one feature tensor (see the module docstring)."""

    known: torch.Tensor
    value: torch.Tensor
    unused: torch.Tensor

    @classmethod
    def nothing(cls, width: int) -> "Facts":
        return cls(torch.zeros(width, dtype=torch.bool), torch.zeros(width, dtype=torch.float64),
                   torch.zeros(width, dtype=torch.bool))

    @property
    def needed(self) -> torch.Tensor:
        """Features that must be computed: neither known nor unused."""
        return ~(self.known | self.unused)


def dense_weight(module) -> torch.Tensor:
    """The weight of an ``nn.Linear`` as a dense float64 CPU tensor (a TorchUST densified)."""
    with torch.no_grad():
        w = module.weight
        w = w.to_dense() if isinstance(w, TorchUST) else w.detach()
        return w.to(device="cpu", dtype=torch.float64)


def dense_bias(module) -> torch.Tensor:
    """The bias as a float64 CPU tensor (zeros without one)."""
    if module.bias is None:
        return torch.zeros(module.out_features, dtype=torch.float64)
    return module.bias.detach().to(device="cpu", dtype=torch.float64)


def _linear(module, into: Facts) -> Facts:
    w, b = dense_weight(module), dense_bias(module)
    known = ~((w != 0) & ~into.known).any(1)
    value = b + w @ torch.where(into.known, into.value, 0.0)
    out = Facts.nothing(w.shape[0])
    out.known, out.value = known, torch.where(known, value, 0.0)
    return out


def _zeros_only(facts: Facts) -> Facts:
    out = Facts.nothing(facts.known.numel())
    out.known = facts.known & (facts.value == 0)
    return out


def _evaluated(node: fx.Node, op: Op, modules: dict, facts: dict, dtype) -> Facts | None:
    """The op run on the inputs' known values (unknown ones as 0); None where that fails."""
    try:
        with torch.no_grad():
            values = {a: facts[a.name].value.to(dtype).clone() for a in op.inputs}  # in-place ops write them
            result = evaluate(node, modules, values)
    except Exception:  # noqa: BLE001  (an op that cannot run on a vector propagates nothing)
        return None
    width = facts[op.inputs[0].name].known.numel()
    if not isinstance(result, torch.Tensor) or tuple(result.shape) != (width,):
        return None
    out = Facts.nothing(width)
    out.known = facts[op.inputs[0].name].known.clone()
    for a in op.inputs[1:]:
        out.known &= facts[a.name].known
    out.value = torch.where(out.known, result.detach().to(torch.float64), 0.0)
    return out


def forward(gm: fx.GraphModule, ops: dict, shapes: dict, dtypes: dict, pinned=frozenset()) -> dict:
    """``{node name: Facts}`` for every feature tensor, ``unused`` still all False. Nothing is known
    of the ``pinned`` nodes (an in-place op writes into them; see ``propagate_ops.pinned``)."""
    modules = dict(gm.named_modules())
    facts = {}
    for node in gm.graph.nodes:
        if node.name not in ops:
            continue
        width, op = shapes[node.name][-1], ops[node.name]
        out = None
        if op.kind == LINEAR:
            out = _linear(modules[node.target], facts[op.inputs[0].name])
        elif op.kind == UNARY:
            out = _evaluated(node, op, modules, facts, dtypes[node.name]) if op.exact else \
                _zeros_only(facts[op.inputs[0].name])
        elif op.kind == BINARY:
            out = _evaluated(node, op, modules, facts, dtypes[node.name]) if op.exact else None
            if out is not None and op.product:
                zero = torch.zeros_like(out.known)
                for a in op.inputs:
                    zero |= facts[a.name].known & (facts[a.name].value == 0)
                out.known |= zero
                out.value[zero] = 0.0
        facts[node.name] = out if out is not None and node.name not in pinned else Facts.nothing(width)
    return facts


def _ignored(user: fx.Node, op: Op, node: fx.Node, facts: dict, weights: dict) -> torch.Tensor | None:
    """The features of ``node`` that ``user`` ignores; None: it reads them all."""
    if node not in op.inputs or op.kind not in (LINEAR, UNARY, BINARY):
        return None
    out = facts[user.name]
    if op.kind == LINEAR:
        return ~(weights[user.name] != 0)[out.needed].any(0)
    ignored = out.unused.clone()
    if op.kind == BINARY and op.product and op.inputs[0] is not op.inputs[1]:
        other = facts[op.inputs[1 if op.inputs[0] is node else 0].name]
        ignored |= other.known & (other.value == 0)
    return ignored


def backward(gm: fx.GraphModule, ops: dict, facts: dict) -> None:
    """Fill in ``unused`` of every :class:`Facts` in ``facts`` (in place)."""
    modules = dict(gm.named_modules())
    weights = {n.name: dense_weight(modules[n.target]) for n in gm.graph.nodes
               if n.name in ops and ops[n.name].kind == LINEAR}
    for node in reversed(gm.graph.nodes):
        if node.name not in facts:
            continue
        unused = torch.ones_like(facts[node.name].known)
        for user in node.users:
            ignored = _ignored(user, ops.get(user.name, Op("boundary")), node, facts, weights)
            if ignored is None:
                unused[:] = False
                break
            unused &= ignored
        facts[node.name].unused = unused
