"""``prune_model``: prune a model's ``nn.Linear`` weights in place (magnitude, local or global, or n:m).

``fold_torch_pruning`` turns a layer pruned with ``torch.nn.utils.prune`` back
into a plain one holding the masked weight; both ``prune_model`` and
``reformat_model`` call it first.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .. import prune as ustc_prune
from .subclass import TorchUST


def fold_torch_pruning(module: nn.Module, name: str = "weight") -> bool:
    """Fold a ``torch.nn.utils.prune`` mask into ``module.<name>`` (``prune.remove``); whether there was one.

    Afterwards ``module.<name>`` is a plain Parameter holding ``<name>_orig * <name>_mask``;
    the ``_orig`` parameter, the ``_mask`` buffer and the forward pre-hook are gone.
    """
    from torch.nn.utils import prune

    for hook in module._forward_pre_hooks.values():
        if isinstance(hook, prune.BasePruningMethod) and hook._tensor_name == name:
            prune.remove(module, name)
            return True
    return False


def prune_model(model: nn.Module, amount: float = 0.5, method: str = "magnitude", local: bool = True) -> dict:
    """Prune every dense ``nn.Linear`` weight in place; returns ``{layer name: PruneMetrics}``.

    ``method``: ``"magnitude"`` (unstructured, by ``|w|``) or ``"n:m"`` such as
    ``"2:4"`` (``amount`` is then unused). Magnitude pruning with ``local=True``
    zeroes the ``amount`` share of smallest ``|w|`` in each layer on its own;
    with ``local=False`` all the weights are ranked together and the ``amount``
    share of smallest ``|w|`` of the model goes, so layers lose different shares
    (n:m pruning is per block: ``local=False`` is a ValueError there).
    A ``torch.nn.utils.prune`` mask is folded in first; a weight tied to
    several layers is pruned once (under the first layer's name). The weights
    stay dense tensors; :func:`reformat_model` then stores them sparse.
    """
    if method != "magnitude" and ":" not in method:
        raise ValueError(f"method must be 'magnitude' or 'n:m' such as '2:4', got {method!r}")
    if method != "magnitude" and not local:
        raise ValueError(f"{method} pruning keeps n of every m entries in each layer; local=False is for "
                         f"method='magnitude'")
    layers, seen = [], set()
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        fold_torch_pruning(module)
        if isinstance(module.weight, TorchUST) or id(module.weight) in seen:
            continue
        seen.add(id(module.weight))
        # the metrics compare against the weights before pruning
        weight = module.weight.detach().cpu()
        if weight.dtype == torch.bfloat16:  # no NumPy bfloat16; widening is exact, so the ranking is the same
            weight = weight.float()
        layers.append((name or "model", module.weight, weight.numpy().copy()))
    if method != "magnitude":
        n, m = (int(x) for x in method.split(":"))
        masks = [ustc_prune.nm_mask(np.abs(array), n, m) for _, _, array in layers]
    elif local:
        masks = [ustc_prune.magnitude_mask(array, amount) for _, _, array in layers]
    else:
        masks = ustc_prune.global_magnitude_masks([array for _, _, array in layers], amount)
    metrics = {}
    for (name, weight, array), keep in zip(layers, masks):
        with torch.no_grad():
            weight.mul_(torch.from_numpy(keep).to(weight.device, weight.dtype))
        metrics[name] = ustc_prune.compute_metrics(array, keep)
    return metrics
