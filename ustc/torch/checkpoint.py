"""Checkpoints of TorchUSTs: ``torch.save`` / ``torch.load(weights_only=True)`` and ``load_state_dict``.

A TorchUST pickles as its storage only: the format's canonical text, the shape,
the pos / crd buffers and the values as torch tensors, and the frozen-slot
mask (``"nonzero"`` when it is the values' nonzeros, as after
``reformat_model``, else bit-packed). Unsigned 16 / 32 / 64-bit index buffers
travel as signed views of the same bytes, their dtype named beside them: plain
``pickle`` (``copy``, multiprocessing) writes a tensor through torch's legacy
storage format, which cannot read those dtypes back. ``torch.save`` writes those tensors as it
writes any tensor, so a checkpoint is the storage plus a few hundred bytes, and
``torch.load`` rebuilds the TorchUST through :func:`rebuild_torch_ust`. That
function only builds tensors from tensors and a format text; importing
``ustc.torch`` allow-lists it for ``torch.load(weights_only=True)`` (the
default), and :func:`safe_globals` / :func:`add_safe_globals` do so explicitly.

``load_state_dict`` across dense and sparse models: every module that gets a
TorchUST parameter gets a load_state_dict pre-hook (:func:`register_load_hooks`,
installed by a global parameter-registration hook), so that

* a dense tensor loaded into a TorchUST parameter is stored again in that
  parameter's format (its nonzeros become the pattern, as ``reformat_model``
  would store them), the parameter object kept;
* a TorchUST of another pattern or format is converted to the parameter's format;
* with ``assign=True`` the parameter becomes a TorchUST in the parameter's format
  (a dense tensor) or the loaded TorchUST itself: never a dense tensor.

A TorchUST loaded into a dense parameter is copied as dense (``copy_``).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..errors import FormatError, StorageError, UnsupportedOperation
from ..format.ir import TensorFormat
from ..tensor import packages
from ..tensor.tensor import Tensor
from .pattern import _KEEP, keep_mask, same_pattern, share, slot_count
from .subclass import TorchUST, format_label, host, to_torch, with_values

VERSION = 1


def _compact(t):
    """``t`` alone in its storage (``torch.save`` writes whole storages): a copy when it is a part of one."""
    t = t.detach()
    if t.storage_offset() == 0 and t.untyped_storage().nbytes() == t.numel() * t.element_size():
        return t
    return t.clone()


def _keep_spec(x: TorchUST):
    keep = keep_mask(x.ust)
    if keep is None:
        return None
    values = x.stored_values().detach().reshape(-1)
    if len(keep) == values.numel() and np.array_equal(keep, (values != 0).cpu().numpy()):
        return "nonzero"
    return torch.from_numpy(np.packbits(keep))


# unsigned dtypes torch's legacy (plain pickle) storage format cannot read back, and their signed twins
_UNSIGNED = {"uint16": (torch.uint16, torch.int16), "uint32": (torch.uint32, torch.int32),
             "uint64": (torch.uint64, torch.int64)}
_SIGNED = {unsigned: (name, signed) for name, (unsigned, signed) in _UNSIGNED.items()}


def _signed(b):
    """``(b as stored, its dtype's name or "")``: an unsigned 16 / 32 / 64-bit ``b`` as a signed view of its bytes."""
    b = _compact(b)
    if b.dtype not in _SIGNED:
        return b, ""
    name, signed = _SIGNED[b.dtype]
    return b.view(signed), name


def _unsigned(b, name: str):
    """The inverse of :func:`_signed`."""
    if not name:
        return b
    if name not in _UNSIGNED or b.dtype != _UNSIGNED[name][1]:
        raise StorageError(f"ustc.torch: a checkpoint buffer of dtype {b.dtype} is marked {name!r}")
    return b.view(_UNSIGNED[name][0])


def reduce_torch_ust(x: TorchUST):
    """``__reduce_ex__`` of a TorchUST: :func:`rebuild_torch_ust` and its storage (see the module docstring)."""
    keys = [[int(level), str(name)] for level, name in x._keys]
    buffers, views = zip(*(_signed(b) for b in x.buffer_tensors)) if x._keys else ((), ())
    return (rebuild_torch_ust, (VERSION, x.signature, list(x.shape), keys, list(buffers), _compact(x.stored_values()),
                                _keep_spec(x), bool(x.requires_grad), bool(getattr(x, "_is_param", False)),
                                list(views)))


def rebuild_torch_ust(version, signature, shape, keys, buffers, values, keep, requires_grad, is_param, views=None):
    """A TorchUST (an ``nn.Parameter`` when ``is_param``) from a checkpoint's storage; ``views`` names the
    unsigned dtype of each buffer stored as a signed view ("" for the others; checkpoints written before
    it was added have none)."""
    if version != VERSION:
        raise StorageError(f"ustc.torch: checkpoint version {version} is not supported (this ustc reads {VERSION})")
    fmt = TensorFormat.parse(signature)
    device = "cuda" if values.device.type == "cuda" else "cpu"
    buffers = [_unsigned(b, name) for b, name in zip(buffers, views or [""] * len(buffers))]
    array = {(int(level), str(name)): host(b) for (level, name), b in zip(keys, buffers)}
    ust = Tensor(fmt, tuple(int(n) for n in shape), array, host(values), device=device, package=packages.TORCH)
    x = TorchUST(ust, dtype=values.dtype)
    if isinstance(keep, str):
        x.freeze_zeros_()
    elif keep is not None:
        _KEEP[ust] = np.unpackbits(keep.cpu().numpy())[:slot_count(ust)].astype(bool)
    if is_param:
        return nn.Parameter(x, requires_grad=requires_grad)
    return x.requires_grad_() if requires_grad else x


SAFE_GLOBALS = [rebuild_torch_ust]


def add_safe_globals() -> None:
    """Allow-list what ``torch.load(weights_only=True)`` needs for TorchUSTs (``import ustc.torch`` does it)."""
    torch.serialization.add_safe_globals(SAFE_GLOBALS)


def safe_globals():
    """``with ustc.torch.safe_globals(): torch.load(path)`` — the allow-list for one block."""
    return torch.serialization.safe_globals(SAFE_GLOBALS)


# -- load_state_dict ---------------------------------------------------------------------------
def restore(param: TorchUST, incoming, key: str = "") -> Tensor:
    """``incoming`` (dense or TorchUST, ``param``'s shape) stored in ``param``'s format and dtype."""
    fmt = param.ust.format
    try:
        if isinstance(incoming, TorchUST):
            if incoming.ust.format == fmt and incoming.dtype == param.dtype:
                return incoming.ust.copy()
            incoming = incoming.to_dense()
        dense = incoming.detach().to(device="cpu")
        wide = dense.float() if param.dtype == torch.bfloat16 else dense.to(param.dtype)
        ust = Tensor.from_dense(wide.contiguous(), fmt)
    except (FormatError, StorageError, UnsupportedOperation, ValueError) as exc:
        raise UnsupportedOperation(
            f"ustc.torch.load_state_dict: {key or 'a tensor'} does not fit the parameter's format "
            f"{format_label(fmt)} ({exc}); prune it to fit first, or load it into a dense model and call "
            f"ustc.torch.reformat_model") from exc
    if param.dtype == torch.bfloat16:
        ust = with_values(ust, to_torch(ust.raw_values).to(torch.bfloat16))
    return ust if param.device.type == "cpu" else ust.to(param.device.type)


def replace_storage(param: TorchUST, ust: Tensor) -> None:
    """Give ``param`` (the same Python object: optimizers and tied modules keep it) new storage.

    A parameter whose pattern was frozen gets the new storage's nonzeros as its
    pattern; a gradient of the old pattern is dropped.
    """
    frozen = keep_mask(param.ust) is not None
    param._set_ust(ust)
    if frozen:
        param.freeze_zeros_()
    grad = param.grad
    if grad is not None and not (isinstance(grad, TorchUST) and same_pattern(grad.ust, ust)):
        param.grad = None


def _loaded(param: TorchUST, incoming, assign: bool, key: str):
    if isinstance(incoming, TorchUST):
        if assign or (same_pattern(incoming.ust, param.ust) and incoming.dtype == param.dtype):
            return incoming  # torch assigns it, or copy_ copies the values
    ust = restore(param, incoming, key)
    if assign:
        fresh = TorchUST(ust, dtype=param.dtype)
        return fresh.freeze_zeros_() if keep_mask(param.ust) is not None else fresh
    replace_storage(param, ust)
    return TorchUST(param)  # the parameter's own storage: copy_ has nothing left to do


def load_pre_hook(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
    """``load_state_dict`` pre-hook of a module holding TorchUST parameters (see the module docstring)."""
    assign = local_metadata.get("assign_to_params_buffers", False)
    for name, param in module._parameters.items():
        key = prefix + name
        if not isinstance(param, TorchUST) or key not in state_dict:
            continue
        incoming = state_dict[key]
        if isinstance(incoming, torch.Tensor) and tuple(incoming.shape) == tuple(param.shape):
            with torch.no_grad():
                state_dict[key] = _loaded(param, incoming, assign, key)


def register_load_hooks(module: nn.Module) -> None:
    """Give ``module`` the load_state_dict pre-hook for its TorchUST parameters (once)."""
    if not any(getattr(h, "hook", h) is load_pre_hook for h in module._load_state_dict_pre_hooks.values()):
        module._register_load_state_dict_pre_hook(load_pre_hook, with_module=True)


def _on_parameter(module, name, param):
    if isinstance(param, TorchUST):
        register_load_hooks(module)
    return None


_REGISTERED = {}


def install() -> None:
    """Allow-list the rebuild function and watch parameter registration (idempotent; run at import)."""
    add_safe_globals()
    if not _REGISTERED:
        _REGISTERED["handle"] = nn.modules.module.register_module_parameter_registration_hook(_on_parameter)
