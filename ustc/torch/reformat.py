"""``reformat_model``: store the weights of a model's ``nn.Linear`` layers as TorchUSTs.

    >>> import torch, ustc.torch
    >>> model = torch.nn.Sequential(torch.nn.Linear(8, 4))
    >>> metrics = ustc.torch.prune_model(model, 0.5, method="2:4")
    >>> summary = ustc.torch.reformat_model(model)
    >>> summary.layers[0].format
    'Structured(2, 4)'

After ``reformat_model`` the model runs unchanged code: ``F.linear`` meets a
TorchUST weight and computes through ``ustc.matmul`` (see ``ustc.torch.subclass``),
and trains with any ``torch.optim`` optimizer keeping the pruning mask
(``ustc.torch.pointwise``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from ..errors import ShapeError
from ..formats import CSR, Structured
from ..format.ir import TensorFormat
from ..tensor.tensor import Tensor
from .linear import adopt
from .pruning import fold_torch_pruning
from .subclass import TorchUST, format_label, to_torch, with_values


@dataclass(frozen=True)
class LayerSummary:
    """One ``nn.Linear`` weight: its format after reformatting (``"dense"`` when left alone),
    the share of nonzero entries, and the bytes of the weight before and after. ``tied_to``:
    the earlier layer or the other module (``"emb.weight"``) that holds the same weight, else ""."""

    name: str
    shape: tuple
    format: str
    density: float
    bytes_before: int
    bytes_after: int
    tied_to: str = ""


@dataclass
class ReformatSummary:
    """What ``reformat_model`` did, layer by layer; ``str()`` is a table."""

    layers: list = field(default_factory=list)

    def _counted(self):
        names = {layer.name for layer in self.layers}
        return [layer for layer in self.layers if layer.tied_to not in names]

    @property
    def bytes_before(self) -> int:
        """Bytes of the weights before, each tied weight once."""
        return sum(layer.bytes_before for layer in self._counted())

    @property
    def bytes_after(self) -> int:
        return sum(layer.bytes_after for layer in self._counted())

    def __str__(self) -> str:
        rows = [f"{'layer':<28} {'shape':>12} {'format':>18} {'density':>8} {'bytes':>10} {'after':>10}"]
        for s in self.layers:
            shape = "x".join(map(str, s.shape))
            tied = f"  (tied to {s.tied_to})" if s.tied_to else ""
            rows.append(f"{s.name:<28} {shape:>12} {s.format:>18} {s.density:>8.3f} {s.bytes_before:>10} "
                        f"{s.bytes_after:>10}{tied}")
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

    Density is the share of nonzero entries; an all-dense-enough weight stays dense,
    and a weight that is a TorchUST already is left as it is (None).
    """
    if isinstance(weight, TorchUST):
        return None
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
    if w.dtype == torch.bfloat16:  # NumPy has no bfloat16: stored from float32, values narrowed to bits
        wide = Tensor.from_dense(w.cpu().float(), fmt)
        narrow = with_values(wide, to_torch(wide.raw_values).to(torch.bfloat16))
        return TorchUST(narrow.to(w.device.type), dtype=torch.bfloat16)
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


def _holders(model: nn.Module) -> dict:
    """``id(parameter) -> [(module name, module, attribute)]`` for every module holding it directly."""
    holders: dict = {}
    for mname, module in model.named_modules():
        for attr, param in module._parameters.items():
            if param is not None:
                holders.setdefault(id(param), []).append((mname or "model", module, attr))
    return holders


def reformat_model(model: nn.Module, func: Callable | None = None) -> ReformatSummary:
    """Replace each ``nn.Linear`` weight by ``func(weight)`` when that is not None; returns a summary.

    ``func(weight)`` receives the (detached) weight and returns a TorchUST (any
    format; a ustc Tensor or torch sparse tensor is wrapped) or None to leave
    it. The default is :func:`default_reformat`. The model is changed in place:

    * a layer pruned with ``torch.nn.utils.prune`` (``weight_orig``,
      ``weight_mask`` and a pre-hook) has its mask folded in first
      (:func:`fold_torch_pruning`), so the model computes what the pruned one did;
    * a new TorchUST weight gets :meth:`TorchUST.freeze_zeros_`: its pattern is
      its nonzeros, so training keeps the pruning mask (zeros stored inside
      blocks or as n:m padding stay 0);
    * tied weights stay tied: each Parameter is converted once and every
      ``nn.Linear`` holding it gets the new one; a weight that a module other
      than ``nn.Linear`` also holds (an ``nn.Embedding`` tied to an output
      layer) stays dense, since that module could not use a TorchUST;
    * weights already stored as TorchUST are passed to ``func`` too;
      :func:`default_reformat` leaves them, so a second call changes nothing;
    * each exact ``nn.Linear`` left with a TorchUST weight becomes a
      :class:`~ustc.torch.linear.SparseLinear` (an ``nn.Linear`` subclass whose
      eager inference calls go straight to the weight's planned product).

    The summary has one row per ``nn.Linear``; a row whose weight is tied to an
    earlier row's names it in ``tied_to`` and is not counted again in the totals.
    """
    func = default_reformat if func is None else func
    for module in model.modules():
        if isinstance(module, nn.Linear):
            fold_torch_pruning(module)
    holders = _holders(model)
    summary, done = ReformatSummary(), {}
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        name = name or "model"
        old = module.weight
        before = _nbytes(old)
        if id(old) in done:  # tied to an earlier nn.Linear: already converted
            _, first, before = done[id(old)]
            summary.layers.append(_row(name, old, before, tied_to=first))
            continue
        done[id(old)] = (old, name, before)  # the object is kept alive so that its id stays unique
        others = [h for h in holders.get(id(old), []) if not (isinstance(h[1], nn.Linear) and h[2] == "weight")]
        if others:
            summary.layers.append(_row(name, old, before, tied_to=f"{others[0][0]}.{others[0][2]}"))
            continue
        new = func(old.detach())
        if new is not None:
            weight = _as_weight(new, old, f"{name}.weight")
            weight.freeze_zeros_()
            for _, holder, attr in holders.get(id(old), [(name, module, "weight")]):
                setattr(holder, attr, weight)
            done[id(weight)] = (weight, name, before)
        summary.layers.append(_row(name, module.weight, before))
    for module in model.modules():
        if isinstance(module, nn.Linear) and isinstance(module.weight, TorchUST):
            adopt(module)
    return summary


def _nbytes(weight) -> int:
    return int(weight.ust.nbytes if isinstance(weight, TorchUST) else weight.numel() * weight.element_size())


def _row(name: str, weight, before: int, tied_to: str = "") -> LayerSummary:
    dense = weight.detach().to_dense() if isinstance(weight, TorchUST) else weight.detach()
    return LayerSummary(name, tuple(weight.shape), _format_name(weight), _density(dense), before, _nbytes(weight),
                        tied_to)
