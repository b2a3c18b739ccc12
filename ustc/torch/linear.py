"""``SparseLinear``: the ``nn.Linear`` that ``reformat_model`` leaves where it stored the weight as a TorchUST.

A plain ``nn.Linear`` with a TorchUST weight reaches ustc through
``F.linear``'s ``__torch_function__`` dispatch of the tensor subclass, which
costs about as much as a small product (docs/torch.md, *Inference at batch
1*). ``reformat_model`` therefore changes the class of each exact
``nn.Linear`` whose weight it made a TorchUST to :class:`SparseLinear`: same
parameters, state_dict, hooks and ``isinstance(m, nn.Linear)``, and a forward
that hands a call with nothing to record and no mode active straight to
:func:`ustc.torch.inference.linear` (the weight's planned Matmul). Every other
call (autograd recording, autocast, torch.compile / export, fake tensors,
torch-function or dispatch modes, ``torch.jit`` tracing or scripting, a dense
weight assigned later) runs ``F.linear`` exactly as ``nn.Linear`` does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as _module

from . import inference
from .subclass import TorchUST



class SparseLinear(nn.Linear):
    """``nn.Linear`` whose eager inference calls skip the tensor-subclass dispatch (module docstring)."""

    def __call__(self, *args, **kwargs):
        # nn.Module.__call__ has nothing to do without hooks or a compiled call (~1.5 µs of the call):
        # straight to the planned product where it applies, else nn.Module.__call__ (looked up now, so
        # fx's patched one while it traces)
        if len(args) == 1 and not kwargs:
            params = self._parameters
            weight = params.get("weight")
            if type(weight) is TorchUST and _plain_call(self):  # no hooks, compiling or modes
                out = inference.linear(args[0], weight, params.get("bias"))
                if out is not None:
                    return out
        return nn.Module.__call__(self, *args, **kwargs)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_scripting():
            params = self._parameters  # not self.weight: Module.__getattr__ costs ~0.4 µs a name
            out = eager(input, params.get("weight"), params.get("bias"))
            if out is not None:
                return out
        return F.linear(input, self.weight, self.bias)


def eager(x, weight, bias):
    """``F.linear(x, weight, bias)`` by the planned Matmul where nothing but ustc would see the call,
    else None (the caller runs ``F.linear``)."""
    if type(weight) is not TorchUST or torch.compiler.is_compiling() or _intercepted():
        return None
    return inference.linear(x, weight, bias)


def _plain_call(module: nn.Module) -> bool:
    """Whether ``nn.Module.__call__`` would only call ``forward`` (no hooks of the module's own or global
    ones, no compiled call from ``module.compile()``), nothing compiles, and nothing but ustc must see
    ``F.linear`` (:func:`_intercepted`): ``SparseLinear.__call__``'s checks in one frame (~0.1 µs each)."""
    return not (module._compiled_call_impl is not None or module._forward_hooks or module._forward_pre_hooks or
                module._backward_hooks or module._backward_pre_hooks or _GLOBAL_FORWARD or _GLOBAL_FORWARD_PRE or
                _GLOBAL_BACKWARD or _GLOBAL_BACKWARD_PRE or _compiling() or _autocast() or _function_mode() or
                _dispatch_stack() > 0 or _tracing() is not None)


def _intercepted() -> bool:
    """Whether something besides ustc must see ``F.linear``: autocast, a torch-function or dispatch
    mode (fake tensors included: the dispatch stack's length counts the infra modes, FakeTensorMode's
    among them), or a ``torch.jit.trace`` (which refuses TorchUST products)."""
    return _autocast() or _function_mode() or _dispatch_stack() > 0 or _tracing() is not None


# torch._C's checks bound once (each ``torch._C.name`` lookup costs ~40 ns on the per-call path)
_autocast, _function_mode = torch._C._is_any_autocast_enabled, torch._C._is_torch_function_mode_enabled
_dispatch_stack = torch._C._len_torch_dispatch_stack  # user modes and infra modes (fake, proxy, functional)
# nn.Module's global hooks: dicts torch fills and empties in place (never rebinds), bound once
_GLOBAL_FORWARD, _GLOBAL_FORWARD_PRE = _module._global_forward_hooks, _module._global_forward_pre_hooks
_GLOBAL_BACKWARD, _GLOBAL_BACKWARD_PRE = _module._global_backward_hooks, _module._global_backward_pre_hooks
_tracing = torch._C._get_tracing_state
_compiling = torch.compiler.is_compiling


def plain_forward(module: nn.Module) -> bool:
    """Whether ``module`` computes ``F.linear(x, weight, bias)`` (``nn.Linear``'s forward or this one)."""
    return type(module).forward in (nn.Linear.forward, SparseLinear.forward)


def adopt(module: nn.Module) -> None:
    """Make an exact ``nn.Linear`` a :class:`SparseLinear` (subclasses and other modules are left alone)."""
    if type(module) is nn.Linear:
        module.__class__ = SparseLinear
