"""The kernel half of specialisation: a format per rebuilt layer, sparse ReLU before products, timing.

* :func:`choose_format`: the candidates for a layer's remaining weight are
  dense, ustc's default choice (:func:`ustc.torch.default_reformat`: 2:4 ->
  ``Structured(2, 4)``, above half zeros -> CSR with narrow indices), BSR or
  ``Structured(n, m)`` where its zeros have that structure, and the format the
  weight had when it came in as a TorchUST. With measuring on, the
  fastest on the layer's example input wins (by its fastest of 7 rounds: on a
  shared machine, the noise only ever adds time); without, the incoming
  format, else the default choice, else dense.
* :func:`fuse_sparse_relu` puts a :class:`~ustc.torch.propagate_relu.SparseReluLinear`
  (``linear(relu(x))`` with ``relu(x)`` stored as CSR by ``ustc.sparse_relu``
  and multiplied by a planned ``ustc.Matmul``) in where a ReLU feeds only
  a dense-weight layer, its measured output sparsity is at least
  ``min_sparsity``, and (when measuring) it is faster than ReLU + layer.
* :func:`time_us`: alternating rounds of back-to-back calls, medians.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F
from torch import fx, nn

from ..format.ir import TensorFormat
from ..formats import BSR, Structured
from ..tensor.tensor import Tensor
from .propagate_attrs import BlockPattern, NMPattern, detect_pattern
from .propagate_ops import is_inplace
from .propagate_relu import SparseReluLinear
from .reformat import default_reformat, reformat_model, with_widths
from .subclass import TorchUST, format_label

MIN_SPARSITY = 0.7  # a ReLU output with fewer zeros than this never pays for a sparse product on the CPU
_RELU = (torch.relu, F.relu, "relu")


def time_us(fns: dict, rounds: int = 5, sample_s: float = 0.002) -> dict:
    """``{name: [µs per call, one per round]}``: each round calls every function in turn, ``inner``
    times back to back (``inner`` sized from a first call so that a sample takes about ``sample_s``);
    alternating spreads a shared machine's drift over all of them. Runs under inference_mode."""
    samples = {name: [] for name in fns}
    with torch.inference_mode():
        inner = {}
        for name, fn in fns.items():
            fn()
            start = time.perf_counter()
            fn()
            inner[name] = max(1, min(1000, int(sample_s / max(time.perf_counter() - start, 1e-7))))
        for _ in range(rounds):
            for name, fn in fns.items():
                fn()
                start = time.perf_counter()
                for _ in range(inner[name]):
                    fn()
                samples[name].append((time.perf_counter() - start) / inner[name] * 1e6)
    return samples


def median(values):
    return statistics.median(values) if values else None


def _sparse_copy(module: nn.Linear, weight: TorchUST) -> nn.Linear:
    clone = nn.Linear(1, 1, device="meta")
    clone.in_features, clone.out_features = module.in_features, module.out_features
    clone.weight, clone.bias = module.weight, module.bias
    reformat_model(clone, func=lambda _: weight)
    return clone


def _structured(pattern) -> TensorFormat | None:
    """The format of a weight's detected structure: BSR of its blocks, Structured(n, m) (byte-wide
    in-block coordinates) of its n:m pattern."""
    if isinstance(pattern, BlockPattern):
        return BSR(pattern.rows, pattern.cols)
    if isinstance(pattern, NMPattern):
        return with_widths(Structured(pattern.n, pattern.m), crd_width=8)
    return None


def candidates(module: nn.Linear, incoming: TensorFormat | None) -> dict:
    """``{format label: layer}``: dense (``module`` itself), the default choice, the format of the
    weight's block or n:m structure, the incoming format."""
    found = {"dense": module}
    w = module.weight.detach()
    if min(w.shape) == 0:
        return found
    formats = [default_reformat(w)]
    for fmt in (_structured(detect_pattern(w != 0)), incoming):
        if fmt is None:
            continue
        try:
            formats.append(TorchUST(Tensor.from_dense(w.cpu().contiguous(), fmt).to(w.device.type)))
        except Exception:  # noqa: BLE001  (a smaller weight may no longer fit: 2:4 after dropped columns)
            pass
    for weight in formats:
        if weight is not None:
            found.setdefault(format_label(weight.tensor_format), _sparse_copy(module, weight))
    return found


def choose_format(module: nn.Linear, incoming, example, measure: bool) -> tuple:
    """``(label, layer, {label: µs samples})``: the chosen layer for ``module``'s weight (see above)."""
    found = candidates(module, incoming)
    if not measure or example is None or len(found) == 1:
        order = ([format_label(incoming)] if incoming is not None else []) + list(found)[1:] + ["dense"]
        label = next(label for label in order if label in found)
        return label, found[label], {}
    samples = time_us({label: (lambda m=layer: m(example)) for label, layer in found.items()}, rounds=7)
    label = min(samples, key=lambda k: min(samples[k]))  # the fastest round: a shared machine's noise only adds
    return label, found[label], samples


def _is_relu(node: fx.Node, modules: dict) -> bool:
    if node.op == "call_module":
        return type(modules[node.target]) is nn.ReLU
    return node.op in ("call_function", "call_method") and node.target in _RELU and len(node.args) == 1


def fuse_sparse_relu(gm: fx.GraphModule, density: dict, values: dict, mode: str,
                     min_sparsity: float = MIN_SPARSITY) -> dict:
    """Replace ReLU -> dense ``nn.Linear`` pairs by :class:`SparseReluLinear` in ``gm`` (in place).

    ``density``: measured share of nonzeros per node name; ``values``: example outputs per node name
    (those feeding ReLUs are read). ``mode``: ``"measure"`` (only where faster), ``"always"`` or ``"never"``. Returns
    ``{layer node name: (fused?, {"relu + linear": µs, "sparse_relu": µs})}`` for every pair looked at.
    """
    looked = {}
    if mode == "never":
        return looked
    modules = dict(gm.named_modules())
    for node in list(gm.graph.nodes):
        if not _is_relu(node, modules) or len(node.users) != 1 or not isinstance(node.args[0], fx.Node):
            continue
        user = next(iter(node.users))
        layer = modules.get(user.target) if user.op == "call_module" else None
        if type(layer) is not nn.Linear or isinstance(layer.weight, TorchUST) or user.args != (node,):
            continue
        if 1 - density.get(node.name, 1.0) < min_sparsity:
            continue
        if is_inplace(node, modules) and len(node.args[0].users) > 1:
            continue  # the others read the input after the in-place ReLU
        fused = SparseReluLinear(layer)
        samples = {}
        if mode == "measure":
            x = values[node.args[0].name]
            samples = time_us({"relu + linear": lambda: layer(torch.relu(x)), "sparse_relu": lambda: fused(x)})
            if min(samples["sparse_relu"]) >= min(samples["relu + linear"]):
                looked[user.name] = (False, samples)
                continue
        gm.add_submodule(user.target, fused)
        user.args = (node.args[0],)
        gm.graph.erase_node(node)
        looked[user.name] = (True, samples)
    gm.recompile()
    return looked
