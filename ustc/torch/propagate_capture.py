"""Capture a model for sparsity propagation: a torch.fx graph plus what one run on the example inputs saw.

:func:`capture` traces a copy of the model with ``torch.fx`` (every
``nn.Linear`` a leaf, so each layer stays one ``call_module`` node) and runs it
once on the example inputs, recording per node the output's shape and dtype,
its share of nonzeros, and the input of every module call (for timing layers
later). A submodule that fx cannot trace (data-dependent control flow, ...)
becomes a leaf too, an opaque boundary; a root that cannot be traced raises
:class:`UntraceableModel` naming the module and fx's reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import fx, nn

from ..errors import UnsupportedOperation


class UntraceableModel(UnsupportedOperation):
    """torch.fx could not capture the model (``ustc.UnsupportedOperation``: a ustc error)."""


class _Tracer(fx.Tracer):
    """fx's tracer with ``nn.Linear`` and the modules in ``opaque`` kept as leaves."""

    def __init__(self, opaque=frozenset()):
        super().__init__()
        self.opaque = opaque

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return isinstance(m, nn.Linear) or qualname in self.opaque or super().is_leaf_module(m, qualname)


def _trace(model: nn.Module, opaque=frozenset()) -> fx.GraphModule:
    tracer = _Tracer(opaque)
    graph = tracer.trace(model)
    return fx.GraphModule(tracer.root, graph, type(model).__name__)


def _untraceable(module: nn.Module) -> dict:
    """``{qualified name: reason}`` of the outermost submodules of ``module`` that fx cannot trace on
    their own once their own untraceable submodules are leaves (containers are looked into, not traced)."""
    found = {}
    for name, child in module.named_children():
        if isinstance(child, nn.Linear) or _Tracer().is_leaf_module(child, name):
            continue
        inner = _untraceable(child)
        if isinstance(child, (nn.ModuleList, nn.ModuleDict)):
            found.update({f"{name}.{k}": v for k, v in inner.items()})
            continue
        try:
            _trace(child, frozenset(inner))
            found.update({f"{name}.{k}": v for k, v in inner.items()})
        except Exception as error:  # noqa: BLE001  (fx raises many kinds; each makes the module opaque)
            found[name] = f"{type(error).__name__}: {error}".splitlines()[0]
    return found


def trace(model: nn.Module) -> tuple:
    """``(GraphModule, {opaque submodule: reason})`` of ``model`` (already a private copy).

    Tries the whole model first; where that fails, the submodules fx cannot
    trace on their own become leaves and the model is traced again. Raises
    :class:`UntraceableModel` when the model still cannot be traced.
    """
    try:
        return _trace(model), {}
    except Exception as error:  # noqa: BLE001
        first = error
    opaque = _untraceable(model)
    if opaque:
        try:
            return _trace(model, frozenset(opaque)), opaque
        except Exception:  # noqa: BLE001  (report the first failure: it is about the user's code)
            pass
    reason = f"{type(first).__name__}: {first}".splitlines()[0]
    raise UntraceableModel(
        f"ustc.torch.propagate: torch.fx cannot trace {type(model).__name__} ({reason}); sparsity "
        f"propagation needs a traceable forward: move data-dependent control flow into a submodule "
        f"(it is then kept whole, as a boundary) or make it depend on shapes only") from first


@dataclass
class Observed:
    """What one run of the traced model saw, per node name: the output's ``shape``, ``dtype`` and
    ``device`` (tensors only), its share of nonzeros (``density``), and the outputs asked for (``values``)."""

    shape: dict = field(default_factory=dict)
    dtype: dict = field(default_factory=dict)
    device: dict = field(default_factory=dict)
    density: dict = field(default_factory=dict)
    values: dict = field(default_factory=dict)
    output: object = None


class _Recorder(fx.Interpreter):
    def __init__(self, gm: fx.GraphModule, seen: Observed, keep):
        super().__init__(gm)
        self.seen, self.keep = seen, keep

    def run_node(self, n: fx.Node):
        result = super().run_node(n)
        if n.name in self.keep:
            self.seen.values[n.name] = result
        if isinstance(result, torch.Tensor) and result.layout == torch.strided:
            self.seen.shape[n.name] = tuple(result.shape)
            self.seen.dtype[n.name] = result.dtype
            self.seen.device[n.name] = result.device
            if result.numel() and (result.is_floating_point() or result.dtype == torch.bool):
                self.seen.density[n.name] = float(torch.count_nonzero(result)) / result.numel()
        return result


def fresh(inputs: tuple) -> tuple:
    """Copies of the tensors among ``inputs`` (a model may write into its inputs: ``x += ...``)."""
    return tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in inputs)


def observe(gm: fx.GraphModule, inputs: tuple, keep=frozenset()) -> Observed:
    """Run ``gm`` once on copies of ``inputs`` without autograd and record what it saw, keeping the
    outputs of the nodes named in ``keep``."""
    seen = Observed()
    with torch.no_grad():
        seen.output = _Recorder(gm, seen, frozenset(keep)).run(*fresh(inputs))
    return seen
