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
from .propagate_choose import MIN_SPARSITY, choose_format, fuse_sparse_relu
from .propagate_ops import BOUNDARY, Op, classify, is_feature, is_inplace, pinned, redirect_inplace
from .propagate_report import LayerReport, PropagationReport
from .propagate_rewrite import MIN_SHARE, Rewriter
from .propagate_rules import backward, forward
from .propagate_summary import Run, annotate, report
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
    ops, facts, seen, held = _analyse(gm, inputs)
    new, plans, conversions = Rewriter(gm, ops, facts, seen, min_share, held).run()
    after = observe(new, inputs, _first_arguments(new))
    run = Run(gm, new, inputs, ops, facts, seen, after, plans, sources, conversions, opaque, measure)
    run.chosen = _choose(run)
    mode = "never" if sparse_relu == "measure" and not measure else sparse_relu
    run.fused = fuse_sparse_relu(new, after.density, after.values, mode, min_sparsity)
    annotate(run)
    return new, report(run)


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
    for module in model.modules():
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


def _first_arguments(gm: fx.GraphModule, modules_only: bool = False) -> set:
    """Names of the nodes that are some node's first argument (their outputs are kept when observing)."""
    return {n.args[0].name for n in gm.graph.nodes if n.op != "output" and n.args and
            isinstance(n.args[0], fx.Node) and (n.op == "call_module" or not modules_only)}


def _analyse(gm: fx.GraphModule, inputs: tuple) -> tuple:
    """``(ops, facts, observed, pinned)``: every feature node classified, facts propagated both ways;
    an in-place op writing into a pinned tensor is a boundary (see ``propagate_ops.pinned``)."""
    modules = dict(gm.named_modules())
    redirect_inplace(gm, modules)
    seen = observe(gm, inputs, _first_arguments(gm, modules_only=True))
    held = pinned(gm, modules)
    ops = {n.name: Op(BOUNDARY) if is_inplace(n, modules) and n.args and getattr(n.args[0], "name", None) in held
           else classify(n, modules, seen.shape, seen.dtype)
           for n in gm.graph.nodes if is_feature(n, seen.shape, seen.dtype)}
    facts = forward(gm, ops, seen.shape, seen.dtype, held)
    backward(gm, ops, facts)
    return ops, facts, seen, held


def _choose(run: Run) -> dict:
    """Pick each rebuilt layer's format; ``{node name: (label, {label: µs samples})}``."""
    chosen = {}
    nodes = {n.name: n for n in run.new.graph.nodes}
    old_modules = dict(run.gm.named_modules())
    for plan in run.plans:
        incoming = run.sources.get(old_modules[plan.source], (None, None))[1]
        example = run.after.values.get(nodes[plan.node].args[0].name)
        label, layer, samples = choose_format(plan.module, incoming, example, run.measure)
        run.new.add_submodule(plan.target, layer)
        chosen[plan.node] = (label, samples)
    return chosen
