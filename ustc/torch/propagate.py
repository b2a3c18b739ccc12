"""``ustc.torch.propagate``: SparTA-style sparsity propagation and specialisation of a model.

    >>> import torch, ustc.torch
    >>> from torch import nn
    >>> model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    >>> with torch.no_grad():
    ...     model[0].weight[4:] = 0; model[0].bias[4:] = 0       # rows 4..15 pruned: outputs dead
    >>> fast, report = ustc.torch.propagate(model, torch.randn(3, 8), measure=False)
    >>> [fast.get_submodule(name).weight.shape for name in ("0", "2")]  # both sides of the dead features go
    [torch.Size([4, 8]), torch.Size([4, 4])]
    >>> report.layer("0").output.summary()                            # 12 of 16 outputs are always 0
    '16 (12 dead, 25% nz)'
    >>> x = torch.randn(5, 8)
    >>> torch.testing.assert_close(fast(x), model(x))

How (after SparTA, OSDI '22: "tensors with sparsity attributes" propagated
across the graph, then specialised kernels):

1. a copy of the model is traced with ``torch.fx`` (``nn.Linear`` layers
   stay whole; ``torch.nn.utils.prune`` masks are folded into the copy's
   weights; submodules fx cannot trace are kept whole, as boundaries) and run
   once on the example inputs (shapes, measured activation density);
2. sparsity attributes (:mod:`~ustc.torch.propagate_attrs`) come from the
   weights (zeros of dense weights, TorchUST patterns, pruning masks) and are
   propagated forward (constant and dead features) and backward (unused
   features) through the graph (:mod:`~ustc.torch.propagate_rules`);
3. the layers are rebuilt structurally smaller (:mod:`~ustc.torch.propagate_rewrite`):
   dead or unused rows and columns dropped, known inputs folded into biases,
   gathers and scatters only where a compact tensor meets a boundary;
4. each rebuilt layer gets a format (dense, ustc's default choice or its
   incoming one; the fastest on its example input when ``measure``), and a
   sparse ReLU (``ustc.sparse_relu``) feeds a product where the measured
   activation sparsity is high and that is faster (:mod:`~ustc.torch.propagate_choose`).

The input model is never changed. The result is a ``torch.fx.GraphModule``
computing the same function (up to float rounding: sums run in another
order); its ``tesa`` attribute and each node's ``meta["tesa"]`` hold the
:class:`~ustc.torch.propagate_attrs.FeatureSparsity` of the original graph's
feature tensors. Intended for inference (dropout in training mode is
followed, but a sparse ReLU layer computes no gradient of its own weight).
"""

from __future__ import annotations

import copy

import torch
from torch import fx, nn

from .propagate_attrs import FeatureSparsity, WeightSparsity
from .propagate_capture import UntraceableModel, observe, trace
from .propagate_choose import MIN_SPARSITY, SparseReluLinear, choose_format, fuse_sparse_relu, median, time_us
from .propagate_ops import BOUNDARY, LINEAR, classify, is_feature
from .propagate_report import LayerReport, PropagationReport
from .propagate_rewrite import MIN_SHARE, Rewriter
from .propagate_rules import backward, dense_weight, forward
from .pruning import fold_torch_pruning
from .subclass import TorchUST, format_label

__all__ = ["propagate", "UntraceableModel", "PropagationReport", "LayerReport", "FeatureSparsity",
           "WeightSparsity"]


def propagate(model: nn.Module, example_inputs, *, measure: bool = True, sparse_relu: str = "measure",
              min_share: float = MIN_SHARE, min_sparsity: float = MIN_SPARSITY) -> tuple:
    """``(specialised model, PropagationReport)`` for ``model`` run on ``example_inputs``.

    ``example_inputs``: a tensor or a tuple of positional inputs. ``measure``: time the format
    candidates of every layer and the model before and after on the example inputs (off: no timing,
    formats by rule, no sparse ReLU unless ``sparse_relu="always"``). ``sparse_relu``:
    ``"measure"`` (where faster), ``"always"`` (where the measured sparsity is at least
    ``min_sparsity``) or ``"never"``. ``min_share``: rows or columns of a layer are dropped only when
    at least this share of them can go (each drop may cost a gather or scatter). Raises
    :class:`UntraceableModel` (a ``ustc.UnsupportedOperation``) when fx cannot trace the model.
    """
    if sparse_relu not in ("measure", "always", "never"):
        raise ValueError(f"sparse_relu must be 'measure', 'always' or 'never', got {sparse_relu!r}")
    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    work = private_copy(model)
    if isinstance(work, nn.Linear):  # a bare layer is traced as one node inside a container
        work = nn.Sequential(work)
    sources = _fold(work)
    gm, opaque = trace(work)
    ops, facts, seen = _analyse(gm, inputs)
    new, plans, conversions = Rewriter(gm, ops, facts, seen, min_share).run()
    keep = {n.args[0].name for n in new.graph.nodes if n.op != "output" and n.args and isinstance(n.args[0], fx.Node)}
    after = observe(new, inputs, keep)
    chosen = _choose(new, plans, after, sources, dict(gm.named_modules()), measure)
    mode = "never" if sparse_relu == "measure" and not measure else sparse_relu
    fused = fuse_sparse_relu(new, after.density, after.values, mode, min_sparsity)
    _annotate(new, gm, facts, seen)
    layers = _layers(gm, new, plans, ops, facts, seen, after, sources, chosen, fused, measure)
    return new, _report(gm, new, inputs, seen, ops, facts, layers, conversions, opaque, measure)


def private_copy(model: nn.Module) -> nn.Module:
    """``copy.deepcopy(model)``, also where ``torch.nn.utils.prune`` left a computed weight (a tensor
    with a grad_fn, which deepcopy refuses): that one is copied detached (its pre-hook recomputes it)."""
    memo = {}
    for module in model.modules():
        for value in vars(module).values():
            if isinstance(value, torch.Tensor) and value.grad_fn is not None:
                memo[id(value)] = value.detach().clone()
    return copy.deepcopy(model, memo)


def _fold(model: nn.Module) -> dict:
    """Fold pruning masks into the Linear layers; ``{module: (source label, incoming TorchUST format)}``."""
    sources = {}
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        pruned = fold_torch_pruning(module)
        fold_torch_pruning(module, "bias")
        w = module.weight
        if isinstance(w, TorchUST) and w.dim() == 2:
            sources[module] = (f"TorchUST {format_label(w.tensor_format)}", w.tensor_format)
        else:
            sources[module] = ("torch.nn.utils.prune" if pruned else "zeros", None)
    return sources


def _analyse(gm: fx.GraphModule, inputs: tuple) -> tuple:
    """``(ops, facts, observed)``: every feature node classified, facts propagated both ways."""
    modules = dict(gm.named_modules())
    keep = {n.args[0].name for n in gm.graph.nodes if n.op == "call_module" and n.args
            and isinstance(n.args[0], fx.Node)}
    seen = observe(gm, inputs, keep)
    ops = {n.name: classify(n, modules, seen.shape, seen.dtype) for n in gm.graph.nodes
           if is_feature(n, seen.shape, seen.dtype)}
    facts = forward(gm, ops, seen.shape, seen.dtype)
    backward(gm, ops, facts)
    return ops, facts, seen


def _choose(new: fx.GraphModule, plans, after, sources: dict, old_modules: dict, measure: bool) -> dict:
    """Pick each rebuilt layer's format; ``{node name: (label, {label: µs samples})}``."""
    chosen = {}
    nodes = {n.name: n for n in new.graph.nodes}
    for plan in plans:
        node = nodes[plan.node]
        original = sources.get(old_modules[plan.source], (None, None))[1]
        example = after.values.get(node.args[0].name)
        label, layer, samples = choose_format(plan.module, original, example, measure)
        new.add_submodule(plan.target, layer)
        chosen[plan.node] = (label, samples)
    return chosen


def feature_sparsity(facts, density=None) -> FeatureSparsity:
    """The :class:`FeatureSparsity` of one node's propagated facts."""
    known = torch.nonzero(facts.known).flatten().tolist()
    constant = tuple((f, float(facts.value[f])) for f in known)
    unused = tuple(torch.nonzero(facts.unused).flatten().tolist())
    return FeatureSparsity(facts.known.numel(), constant, unused, density)


def _annotate(new: fx.GraphModule, gm: fx.GraphModule, facts: dict, seen) -> None:
    tesa = {name: feature_sparsity(f, seen.density.get(name)) for name, f in facts.items()}
    for node in new.graph.nodes:
        if node.name in tesa:
            node.meta["tesa"] = tesa[node.name]
    new.tesa = tesa


def _nbytes(module) -> int:
    if isinstance(module, SparseReluLinear):
        return module.weight_t.numel() * module.weight_t.element_size()
    w = module.weight
    return int(w.ust.nbytes) if isinstance(w, TorchUST) else w.numel() * w.element_size()


def _layers(gm, new, plans, ops, facts, seen, after, sources, chosen, fused, measure) -> tuple:
    """A :class:`LayerReport` per Linear of the traced graph, timed before and after when ``measure``."""
    old_modules, new_modules = dict(gm.named_modules()), dict(new.named_modules())
    new_nodes = {n.name: n for n in new.graph.nodes}
    by_node = {plan.node: plan for plan in plans}
    reports = []
    for node in gm.graph.nodes:
        op = ops.get(node.name)
        if op is None or op.kind != LINEAR:
            continue
        old, source = old_modules[node.target], op.inputs[0]
        plan = by_node[node.name]
        layer = new_modules[plan.target]
        weight = WeightSparsity.of(dense_weight(old) != 0, sources.get(old, ("zeros", None))[0])
        label = chosen.get(node.name, ("dense", {}))[0]
        is_fused = fused.get(node.name, (False, {}))[0]
        shape = (layer.out_features, layer.in_features)
        us = (None, None)
        if measure:
            x_old = seen.values.get(source.name)
            x_new = after.values.get(new_nodes[node.name].args[0].name)
            if x_old is not None and x_new is not None:
                timed = time_us({"before": lambda: old(x_old), "after": lambda: layer(x_new)})
                us = (median(timed["before"]), median(timed["after"]))
        folded = int(facts[source.name].known.sum()) - _kept_known(plan, facts[source.name])
        reports.append(LayerReport(
            node.target, weight, feature_sparsity(facts[source.name], seen.density.get(source.name)),
            feature_sparsity(facts[node.name], seen.density.get(node.name)),
            (old.out_features, old.in_features), shape, "sparse_relu + dense" if is_fused else label,
            _nbytes(old), _nbytes(layer), *us, folded))
    return tuple(reports)


def _kept_known(plan, facts_in) -> int:
    """Known input features the rebuilt layer still reads (not folded into its bias)."""
    if plan.cols is None:
        return int(facts_in.known.sum())
    return int(facts_in.known[plan.cols].sum())


def _boundaries(gm: fx.GraphModule, ops: dict, facts: dict, seen) -> tuple:
    """Where propagation stops, one line per kind of boundary: the modules fed feature tensors
    (LayerNorm, opaque modules, ...) and the ops that receive known features at full width."""
    modules = dict(gm.named_modules())
    found = {}  # (kind, what) -> [names, known features handed over]
    for node in gm.graph.nodes:
        op = ops.get(node.name)
        if node.op == "output" or (op is not None and op.kind != BOUNDARY):
            continue
        feeds = [a for a in node.all_input_nodes if a.name in facts]
        known = sum(int(facts[a.name].known.sum()) for a in feeds)
        if not feeds or node.op != "call_module" and not known:
            continue
        what = type(modules[node.target]).__name__ if node.op == "call_module" else \
            getattr(node.target, "__name__", str(node.target))
        entry = found.setdefault((node.op == "call_module", what), [[], 0])
        entry[0].append(str(node.target) if node.op == "call_module" else node.name)
        entry[1] += known
    notes = []
    for (module, what), (names, known) in found.items():
        listed = ", ".join(names[:4]) + (f", ... ({len(names)})" if len(names) > 4 else "")
        text = f"{what}: {listed}: " + ("features mixed or moved, nothing propagates through" if module else
                                        "features moved or mixed")
        notes.append(text + (f"; {known} known features handed over at full width" if known else ""))
    return tuple(notes)


def _max_diff(a, b) -> float:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return max([_max_diff(x, y) for x, y in zip(a, b)], default=0.0)
    if isinstance(a, dict) and isinstance(b, dict):
        return max([_max_diff(a[k], b[k]) for k in a], default=0.0)
    return 0.0


def _report(gm, new, inputs, seen, ops, facts, layers, conversions, opaque, measure) -> PropagationReport:
    with torch.no_grad():
        diff = _max_diff(seen.output, new(*inputs))
    timed = {}
    if measure:
        timed = time_us({"before": lambda: gm(*inputs), "after": lambda: new(*inputs)}, rounds=7, sample_s=0.02)
    activations = tuple(sorted(new.tesa.items(), key=lambda kv: list(facts).index(kv[0])))
    return PropagationReport(
        layers, activations, _boundaries(gm, ops, facts, seen), tuple(conversions),
        tuple(f"{name}: {reason}" for name, reason in opaque.items()),
        median(timed.get("before", [])), median(timed.get("after", [])),
        tuple(timed.get("before", ())), tuple(timed.get("after", ())), diff)
