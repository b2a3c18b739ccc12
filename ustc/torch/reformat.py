"""``reformat_model``: store the weights of a model's ``nn.Linear`` layers as TorchUSTs; ``prune_model``.

    >>> import torch, ustc.torch
    >>> model = torch.nn.Sequential(torch.nn.Linear(8, 4))
    >>> metrics = ustc.torch.prune_model(model, 0.5, method="2:4")
    >>> summary = ustc.torch.reformat_model(model)
    >>> summary.layers[0].format
    'Structured(2, 4)'

After ``reformat_model`` the model runs unchanged code: ``F.linear`` meets a
TorchUST weight and computes through ``ustc.matmul`` (see ``ustc.torch.subclass``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from torch import nn

from .. import prune as ustc_prune
from ..errors import ShapeError
from ..formats import CSR, Structured
from ..format.ir import TensorFormat
from ..tensor.tensor import Tensor
from .subclass import TorchUST, format_label


@dataclass(frozen=True)
class LayerSummary:
    """One ``nn.Linear`` weight: its format after reformatting (``"dense"`` when left alone),
    the share of nonzero entries, and the bytes of the weight before and after."""

    name: str
    shape: tuple
    format: str
    density: float
    bytes_before: int
    bytes_after: int


@dataclass
class ReformatSummary:
    """What ``reformat_model`` did, layer by layer; ``str()`` is a table."""

    layers: list = field(default_factory=list)

    @property
    def bytes_before(self) -> int:
        return sum(layer.bytes_before for layer in self.layers)

    @property
    def bytes_after(self) -> int:
        return sum(layer.bytes_after for layer in self.layers)

    def __str__(self) -> str:
        rows = [f"{'layer':<28} {'shape':>12} {'format':>18} {'density':>8} {'bytes':>10} {'after':>10}"]
        for s in self.layers:
            shape = "x".join(map(str, s.shape))
            rows.append(f"{s.name:<28} {shape:>12} {s.format:>18} {s.density:>8.3f} {s.bytes_before:>10} "
                        f"{s.bytes_after:>10}")
        rows.append(f"{'total':<28} {'':>12} {'':>18} {'':>8} {self.bytes_before:>10} {self.bytes_after:>10}")
        return "\n".join(rows)


def _density(weight) -> float:
    return float(torch.count_nonzero(weight.detach())) / max(1, weight.numel())


def fits_nm(weight, n: int = 2, m: int = 4) -> bool:
    """Whether every block of ``m`` along the rows of the 2-D ``weight`` holds at most ``n`` nonzeros."""
    w = weight.detach()
    if w.dim() != 2 or w.shape[1] % m:
        return False
    return bool(((w != 0).reshape(w.shape[0], -1, m).sum(-1) <= n).all())


def with_widths(fmt: TensorFormat, pos_width: int = 0, crd_width: int = 0) -> TensorFormat:
    """``fmt`` with posWidth / crdWidth set (narrow index buffers: fewer bytes, faster kernels)."""
    return TensorFormat(fmt.dims, fmt.levels, pos_width, crd_width)


def default_reformat(weight, *, min_zeros: float = 0.5):
    """The default choice for a 2-D weight, by its zeros:

    * ``Structured(2, 4)`` (uint8 in-block coordinates) when every block of 4
      along a row holds at most 2 nonzeros, unless CSR would take fewer bytes;
    * CSR (uint16 column indices where they fit) above ``min_zeros`` zeros;
    * else None: the weight stays dense.

    Density is the share of nonzero entries; an all-dense-enough weight stays dense.
    """
    w = weight.detach()
    if w.device.type == "cpu":
        w = w.contiguous()
    rows, cols = w.shape
    nnz, item = int(torch.count_nonzero(w)), w.element_size()
    csr_bytes = nnz * (item + (2 if cols <= 1 << 16 else 4)) + (rows + 1) * 4
    structured_bytes = rows * cols // 2 * (item + 1)
    if fits_nm(w, 2, 4) and not (1 - _density(w) > min_zeros and csr_bytes < structured_bytes):
        fmt = with_widths(Structured(2, 4), crd_width=8)  # in-block coordinates fit a byte
    elif 1 - _density(w) > min_zeros:
        fmt = with_widths(CSR, crd_width=16) if cols <= 1 << 16 else CSR
    else:
        return None
    return TorchUST(Tensor.from_dense(w.cpu(), fmt).to(w.device.type))


def _format_name(weight) -> str:
    if isinstance(weight, TorchUST):
        return format_label(weight.tensor_format)
    return "dense"


def _as_weight(new, old, name: str):
    if not isinstance(new, TorchUST):
        if isinstance(new, Tensor):
            new = TorchUST(new)
        elif isinstance(new, torch.Tensor):
            new = TorchUST.from_torch(new)
        else:
            raise TypeError(f"reformat func returned {type(new).__name__} for {name}; expected a TorchUST, "
                            f"a ustc.Tensor, a torch tensor or None")
    if tuple(new.shape) != tuple(old.shape):
        raise ShapeError(f"reformat func returned shape {tuple(new.shape)} for {name}, expected {tuple(old.shape)}")
    return nn.Parameter(new, requires_grad=old.requires_grad)


def reformat_model(model: nn.Module, func: Callable | None = None) -> ReformatSummary:
    """Replace each ``nn.Linear`` weight by ``func(weight)`` when that is not None; returns a summary.

    ``func(weight)`` receives the (detached) weight and returns a TorchUST (any
    format; a ustc Tensor or torch sparse tensor is wrapped) or None to leave
    it. The default is :func:`default_reformat`. The model is changed in place;
    weights already stored as TorchUST are passed to ``func`` too.
    """
    func = default_reformat if func is None else func
    summary = ReformatSummary()
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        old = module.weight
        before = old.ust.nbytes if isinstance(old, TorchUST) else old.numel() * old.element_size()
        new = func(old.detach())
        if new is not None:
            module.weight = _as_weight(new, old, f"{name or 'model'}.weight")
        weight = module.weight
        dense = weight.detach().to_dense() if isinstance(weight, TorchUST) else weight.detach()
        after = weight.ust.nbytes if isinstance(weight, TorchUST) else weight.numel() * weight.element_size()
        summary.layers.append(LayerSummary(name or "model", tuple(weight.shape), _format_name(weight),
                                           _density(dense), int(before), int(after)))
    return summary


def prune_model(model: nn.Module, amount: float = 0.5, method: str = "magnitude") -> dict:
    """Prune every dense ``nn.Linear`` weight in place; returns ``{layer name: PruneMetrics}``.

    ``method``: ``"magnitude"`` (unstructured: the ``amount`` share of smallest
    ``|w|`` become 0) or ``"n:m"`` such as ``"2:4"`` (``amount`` is then unused).
    The weights stay dense tensors; :func:`reformat_model` then stores them sparse.
    """
    if method != "magnitude" and ":" not in method:
        raise ValueError(f"method must be 'magnitude' or 'n:m' such as '2:4', got {method!r}")
    metrics = {}
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear) or isinstance(module.weight, TorchUST):
            continue
        w = module.weight.detach().cpu()
        array = w.numpy().copy()  # the metrics compare against the weights before pruning
        if method == "magnitude":
            keep = ustc_prune.magnitude_mask(array, amount)
        else:
            n, m = (int(x) for x in method.split(":"))
            keep = ustc_prune.nm_mask(np.abs(array), n, m)
        with torch.no_grad():
            module.weight.mul_(torch.from_numpy(keep).to(module.weight.device, module.weight.dtype))
        metrics[name or "model"] = ustc_prune.compute_metrics(array, keep)
    return metrics
