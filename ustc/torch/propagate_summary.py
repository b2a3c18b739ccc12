"""The report of ``ustc.torch.propagate``: attributes, shapes, formats, bytes and times per layer.

:class:`Run` carries what the pipeline made (the traced graph, the rebuilt
one, the facts, both observed runs); :func:`report` turns it into a
:class:`~ustc.torch.propagate_report.PropagationReport`, timing each layer and
the model before and after where the run measures; :func:`annotate` attaches
the activations' attributes to the rebuilt model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import fx

from .propagate_attrs import FeatureSparsity, WeightSparsity
from .propagate_capture import fresh
from .propagate_choose import median, time_us
from .propagate_relu import SparseReluLinear
from .propagate_ops import BOUNDARY, LINEAR
from .propagate_report import LayerReport, PropagationReport
from .propagate_rules import dense_weight
from .subclass import TorchUST


@dataclass
class Run:
    """One ``propagate`` call: the traced copy ``gm`` and the rebuilt ``new``, the example ``inputs``,
    the node kinds (``ops``) and ``facts``, the observed runs before (``seen``) and after (``after``),
    the rebuilt layers (``plans``), each layer's weight source, the conversions put in, the opaque
    submodules, whether to time, and the choices made (``chosen`` formats, ``fused`` sparse ReLUs)."""

    gm: fx.GraphModule
    new: fx.GraphModule
    inputs: tuple
    ops: dict
    facts: dict
    seen: object
    after: object
    plans: list
    sources: dict
    conversions: list
    opaque: dict
    measure: bool
    chosen: dict = field(default_factory=dict)
    fused: dict = field(default_factory=dict)


def feature_sparsity(facts, density=None) -> FeatureSparsity:
    """The :class:`FeatureSparsity` of one node's propagated facts."""
    known = torch.nonzero(facts.known).flatten().tolist()
    constant = tuple((f, float(facts.value[f])) for f in known)
    unused = tuple(torch.nonzero(facts.unused).flatten().tolist())
    return FeatureSparsity(facts.known.numel(), constant, unused, density)


def annotate(run: Run) -> None:
    """``run.new.tesa`` and ``node.meta["tesa"]``: the attributes of the traced graph's feature tensors."""
    tesa = {name: feature_sparsity(f, run.seen.density.get(name)) for name, f in run.facts.items()}
    for node in run.new.graph.nodes:
        if node.name in tesa:
            node.meta["tesa"] = tesa[node.name]
    run.new.tesa = tesa


def _nbytes(module) -> int:
    if isinstance(module, SparseReluLinear):
        return module.weight_t.numel() * module.weight_t.element_size()
    w = module.weight
    return int(w.ust.nbytes) if isinstance(w, TorchUST) else w.numel() * w.element_size()


def _folded(plan, facts_in) -> int:
    """Known input features folded into the rebuilt layer's bias (those it no longer reads)."""
    kept = facts_in.known if plan.cols is None else facts_in.known[plan.cols]
    return int(facts_in.known.sum()) - int(kept.sum())


def _timed(run: Run, old, layer, source: fx.Node, new_node: fx.Node) -> tuple:
    """``(µs before, µs after)`` of one layer on its example inputs; Nones when not measuring."""
    if not run.measure:
        return None, None
    x_old, x_new = run.seen.values.get(source.name), run.after.values.get(new_node.args[0].name)
    if x_old is None or x_new is None:
        return None, None
    timed = time_us({"before": lambda: old(x_old), "after": lambda: layer(x_new)})
    return median(timed["before"]), median(timed["after"])


def layers(run: Run) -> tuple:
    """A :class:`LayerReport` per Linear of the traced graph."""
    old_modules, new_modules = dict(run.gm.named_modules()), dict(run.new.named_modules())
    by_node = {plan.node: plan for plan in run.plans}
    new_nodes = {n.name: n for n in run.new.graph.nodes}
    reports = []
    for node in run.gm.graph.nodes:
        op = run.ops.get(node.name)
        if op is None or op.kind != LINEAR:
            continue
        old, source, plan = old_modules[node.target], op.inputs[0], by_node[node.name]
        layer = new_modules[plan.target]
        weight = WeightSparsity.of(dense_weight(old) != 0, run.sources.get(old, ("zeros", None))[0])
        label = "sparse_relu + dense" if run.fused.get(node.name, (False,))[0] else \
            run.chosen.get(node.name, ("dense",))[0]
        seen, facts = run.seen, run.facts
        reports.append(LayerReport(
            node.target, weight, feature_sparsity(facts[source.name], seen.density.get(source.name)),
            feature_sparsity(facts[node.name], seen.density.get(node.name)),
            (old.out_features, old.in_features), (layer.out_features, layer.in_features), label,
            _nbytes(old), _nbytes(layer), *_timed(run, old, layer, source, new_nodes[node.name]),
            _folded(plan, facts[source.name])))
    return tuple(reports)


def boundaries(run: Run) -> tuple:
    """Where propagation stops, one line per kind of boundary: the modules fed feature tensors
    (LayerNorm, opaque modules, ...) and the ops that receive known features at full width."""
    modules = dict(run.gm.named_modules())
    found = {}  # (module?, what) -> [names, known features handed over]
    for node in run.gm.graph.nodes:
        op = run.ops.get(node.name)
        if node.op == "output" or (op is not None and op.kind != BOUNDARY):
            continue
        feeds = [a for a in node.all_input_nodes if a.name in run.facts]
        known = sum(int(run.facts[a.name].known.sum()) for a in feeds)
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


def max_diff(a, b) -> float:
    """The largest absolute difference between two outputs (tensors, or tuples / lists / dicts of them)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return max([max_diff(x, y) for x, y in zip(a, b)], default=0.0)
    if isinstance(a, dict) and isinstance(b, dict):
        return max([max_diff(a[k], b[k]) for k in a], default=0.0)
    return 0.0


def report(run: Run) -> PropagationReport:
    """The :class:`PropagationReport` of a finished run (the model timed before and after if measuring)."""
    with torch.no_grad():
        diff = max_diff(run.seen.output, run.new(*fresh(run.inputs)))
    timed = {}
    if run.measure:
        x = fresh(run.inputs)  # the user's tensors stay untouched by models that write into their inputs
        timed = time_us({"before": lambda: run.gm(*x), "after": lambda: run.new(*x)},
                        rounds=7, sample_s=0.02)
    return PropagationReport(
        layers(run), tuple(run.new.tesa.items()), boundaries(run), tuple(run.conversions),
        tuple(f"{name}: {reason}" for name, reason in run.opaque.items()),
        median(timed.get("before", [])), median(timed.get("after", [])),
        tuple(timed.get("before", ())), tuple(timed.get("after", ())), diff)
