"""Optimizer state of TorchUST parameters kept at their pattern.

``torch.optim`` makes its per-element state with ``torch.zeros_like(p)`` (and
``full_like``, ``clone``), which for a TorchUST ``p`` is a dense tensor of
``p``'s full shape (``ustc.torch.ops``: like-ops give dense tensors). Every
later step then runs the state's arithmetic (``lerp_``, ``addcmul_``,
``sqrt``, ``div``) densely, on 10x the entries at 90% zeros, and densifies
the gradient and gathers the state to update ``p``'s values: AdamW's step of
the bench_torch fine-tuning stack took more than the dense masked model's.

Only the entries in ``p``'s pattern ever reach ``p`` (in-place ops on a
TorchUST are projected onto its pattern, ``ustc.torch.pointwise``), so after
each optimizer step a global step post-hook replaces every state tensor of a
TorchUST parameter that has the parameter's shape and dtype by a TorchUST of
the parameter's pattern holding the state's entries there (0 in padding and
frozen slots). From the next step on the optimizer's element-wise ops run on
the stored values alone (``ustc.torch.pointwise``: same-pattern operands),
giving ``p`` exactly the dense masked model's values (tests/torch/test_optim.py).
The state outside the pattern is dropped; no optimizer of ``torch.optim`` reads
it for ``p``'s update. The first step runs densely, as does any step after
``load_state_dict`` gave dense state.

Optimizers in :data:`DENSE_STATE` keep their state dense: their update of
an entry reads the other entries of the state (``torch.optim.Muon``
orthogonalises the whole 2-D momentum, a dense matrix function), so the update
the pattern receives is the dense one, computed as the dense masked model
computes it and projected onto the pattern by the in-place step.

The reverse case, TorchUST state on a dense parameter (an optimizer state_dict
saved with a sparse model and loaded with a dense one), is made dense before
the step by a pre-hook: an in-place op on a TorchUST state would otherwise
drop the dense gradient's entries outside the pattern.
"""

from __future__ import annotations

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from .autograd import sample
from .subclass import TorchUST

_HOOKS: list = []  # the two global hooks' handles, installed once

# optimizer classes whose per-element state must stay dense (module docstring); users may add theirs
DENSE_STATE: set = {torch.optim.Muon} if hasattr(torch.optim, "Muon") else set()  # Muon: torch >= 2.9


def _per_element(param, value) -> bool:
    return type(value) is torch.Tensor and value.dim() > 0 and value.shape == param.shape and \
        value.dtype == param.dtype and value.device == param.device


def _entries(optimizer, sparse: bool):
    """``(parameter, its state dict)`` of each parameter with state: TorchUSTs (``sparse``) or the others."""
    state = optimizer.state
    for group in optimizer.param_groups:
        for p in group["params"]:
            if isinstance(p, TorchUST) != sparse or (sparse and p._ust is None):
                continue
            entry = state.get(p)
            if entry:
                yield p, entry


def _pattern_state(optimizer, args, kwargs) -> None:
    """Step post-hook: the per-element state of each TorchUST parameter as a TorchUST of its pattern
    (not for :data:`DENSE_STATE` optimizers)."""
    if isinstance(optimizer, tuple(DENSE_STATE)):
        return
    for p, entry in _entries(optimizer, sparse=True):
        for key, value in entry.items():
            if _per_element(p, value):
                entry[key] = sample(p.ust, value.detach())  # the state at p's pattern


def _dense_state(optimizer, args, kwargs) -> None:
    """Step pre-hook: TorchUST state of a dense parameter made dense (a loaded sparse model's state), and of
    every parameter of a :data:`DENSE_STATE` optimizer."""
    kinds = (False, True) if isinstance(optimizer, tuple(DENSE_STATE)) else (False,)
    for sparse in kinds:
        for _, entry in _entries(optimizer, sparse=sparse):
            for key, value in entry.items():
                if isinstance(value, TorchUST):
                    entry[key] = value.to_dense()


def install() -> None:
    """Register the two global step hooks (once per process)."""
    if not _HOOKS:
        _HOOKS.append(register_optimizer_step_pre_hook(_dense_state))
        _HOOKS.append(register_optimizer_step_post_hook(_pattern_state))
