"""The inference path of a sparse ``nn.Linear``: one planned ``ustc.Matmul`` per weight and input shape.

``F.linear(x, W, bias)`` with a TorchUST ``W`` on the CPU, when autograd has
nothing to record (``torch.inference_mode()``, ``torch.no_grad()``, or no
operand requiring grad), skips the general route (the transposed view, the
autograd Function, ``ustc.matmul``'s operand checks and plan-cache lookup,
which cost several times a small product): each weight keeps a planned
:class:`ustc.Matmul` ``W @ B`` per input shape and dtype, over an input
buffer ``B`` and the Matmul's own output buffer, both fixed, so the generated
kernel's arguments stay bound. A call copies ``xᵀ`` into ``B``, executes, and
copies the result out (a new tensor, ``bias`` added). At batch 1 (an SpMV)
where the route is a hand-written kernel, the plan's ``Matmul.bind_call``
runs it on the call's own ``x`` instead, writing the result (onto the bias:
the kernel's row write adds to it) into a buffer the plan keeps and hands out
again only once nobody holds the last result (:mod:`ustc.torch.results`).
The Matmul reads ``W``'s value buffer itself, so in-place updates of
the weight are seen; a weight given new storage (``load_state_dict``) gets
new plans. bfloat16 weights keep a float32 twin of their values, refreshed at
every call.

``benchmarks/bench_torch.py`` measures a call against the planned product
alone (``docs/torch.md``).
"""

from __future__ import annotations

import threading
import weakref

import numpy as np
import torch

from .. import Matmul
from ..kernels._simd import aligned_empty
from ..tensor.tensor import Tensor
from .matmul import operand
from .results import KeptResult
from .subclass import TorchUST, host, to_torch

ENABLED = {"on": True}  # off: every call takes the general route (benchmarks/bench_torch.py compares them)
_PLANS: "weakref.WeakKeyDictionary[Tensor, dict]" = weakref.WeakKeyDictionary()  # ust -> {key: _Plan}
_MAX_SHAPES = 8  # input shapes kept per weight
_inference_mode = torch.is_inference_mode_enabled  # (a builtin: ~0.1 µs)
_grad_enabled = torch.is_grad_enabled
_DENSE = (torch.nn.Parameter, torch.Tensor)  # a bias of these exact types is a dense tensor, not a TorchUST


class _Plan:
    """A planned ``W @ B`` over fixed buffers; ``lock`` guards fill, execute and read-back.

    ``B`` is ``(rows,)`` at batch 1, else ``(rows, batch)``; ``b_in`` is the view of it that takes
    ``x`` as it comes (``(1, rows)`` at batch 1, ``Bᵀ`` otherwise), so a call copies without reshaping.
    """

    def __init__(self, weight: TorchUST, rows: int, batch: int, dtype: torch.dtype):
        ust = weight.ust
        self.wide = None
        if weight._v.dtype == torch.bfloat16:  # a float32 twin of the values, refreshed per call
            values = np.empty(ust.raw_values.shape, dtype=np.float32)
            self.wide = (torch.from_numpy(values), weight._v)
            a = Tensor(ust.format, ust.shape, ust.raw_buffers, values)
        else:
            a = operand(weight)
        compute = np.float32 if dtype == torch.bfloat16 else host(torch.empty(0, dtype=dtype)).dtype
        self.b = aligned_empty((rows,) if batch == 1 else (rows, batch), compute)  # vector loads in whole lines
        self.b.fill(0)
        b_torch = torch.from_numpy(self.b)
        self.b_in = b_torch.view(1, rows) if batch == 1 else b_torch.t()
        self.mm = Matmul(a, self.b)
        self.mm.plan()
        self.product = self.mm.runner()  # the route alone where execute would do nothing more
        self.lock = threading.Lock()
        self.batch = batch
        self.exact = batch == 1 and dtype != torch.bfloat16  # one() applies: the result comes in dtype
        self.out = (None, None, None)  # (the Matmul's result array, its torch views: as computed, as one row)
        self.rows_out, self.compute, self.out_dtype = ust.shape[0], compute, dtype
        self.complex = np.dtype(compute).kind == "c"
        # batch 1: a hand-written kernel on the call's own x, into a kept result (one()). The generated
        # kernel's call with its arguments swapped measured slower than _one_copied's two torch copies
        # (512 x 512 at 90% zeros, thread CPU time, 21 alternating rounds, load 15: 1.37x the planned
        # product against 1.31x), the hand-written kernels faster (2048 x 2048: 1.08-1.14x against 1.13-1.19x)
        call = self.mm.bind_call(self.b, np.empty(self.rows_out, compute)) if self.exact else None
        self.call = call if call is not None and call.direct and call.kind == "registered kernel" else None
        self.at = None if self.call is None else self.call.at_address  # one(): the kernel reading x in place
        self.bias = (None, None, None, None)  # (bias, its data pointer, its shape, its NumPy view or None)
        # one() results: (out,) and (1, out), each outside and inside inference mode
        self.results = tuple(KeptResult(shape, compute) for shape in ((self.rows_out,), (1, self.rows_out)) * 2)

    def run(self, x2d, dtype: torch.dtype, bias, row: bool = False):
        """``(W @ x2dᵀ)`` as a new tensor of ``dtype`` plus ``bias``: ``(out,)`` at batch 1 (``(1, out)``
        with ``row``), else ``(out, batch)``. ``x2d``: ``(batch, rows)``; at batch 1 also ``(rows,)``."""
        with self.lock:
            if self.wide is not None:
                self.wide[0].copy_(self.wide[1])
            self.b_in.copy_(x2d)
            array = self.product()  # the Matmul's own buffer: copied out below, under the lock
            views = self.out if array is self.out[0] else self._views(array)
            out = views[2] if row else views[1]
            if bias is not None and self.batch != 1:
                bias = bias[:, None]
            if out.dtype != dtype:
                out = out.to(dtype)
                return out if bias is None else out.add_(bias)
            return out.clone() if bias is None else torch.add(out, bias)

    def one(self, x, bias, row: bool):
        """:meth:`run` at batch 1 where the result comes in the call's dtype (``exact``): ``x`` is ``(rows,)``
        or ``(1, rows)`` (``row``: the result is ``(1, out)``). Through the bound call (``self.call``) the
        kernel reads ``x`` in place (at its data pointer where the route reads an address, ``self.at``: a
        contiguous ``x`` without a negative or conjugate bit; else through its NumPy view, a copy where it
        is strided; else copied into the plan's ``b`` first) and writes the result, onto the bias
        (the kernel's row write adds it), into a :class:`~ustc.torch.results.KeptResult`: the last
        result again where nobody holds it any more, else a new tensor, so a result the caller keeps is
        never overwritten by a later call. (The result cannot overlap ``x`` or the bias: a tensor on the
        kept buffer's memory makes :meth:`KeptResult.take` give a new one.)"""
        call, at, xn = self.call, self.at, None
        if call is None:
            return self._one_copied(x, bias, row)
        if at is not None:
            try:  # (a conjugate bit only on complex tensors; a negative one also on real parts, z.conj().imag)
                address = x.data_ptr() if x.is_contiguous() and not (x.is_neg() or self.complex and x.is_conj()) \
                    else None
            except RuntimeError:  # (a layout without strides or storage)
                address = None
        else:  # a kernel taking arrays only: x's NumPy view (a copy where it is strided)
            address = None
            try:
                xn = (x.detach() if x.requires_grad else x).numpy()
            except (RuntimeError, TypeError):  # a conjugate / negative view: copied into the plan's b below
                pass
            else:
                xn = xn[0] if row else xn
                if xn.strides != call.b.strides:
                    xn = np.ascontiguousarray(xn)
        lock = self.lock
        lock.acquire()  # (take() and the writes: one caller at a time; ~50 ns less than a with block)
        try:
            if self.wide is not None:  # the float32 twin of the values, refreshed for this call
                self.wide[0].copy_(self.wide[1])
            if bias is None:
                add = None
            else:  # _bias_view's check of the kept view inlined
                add = self.bias
                add = add[3] if add[0] is bias and add[1] == bias.data_ptr() and add[2] == bias.shape \
                    else self._bias_view(bias)
            kept = self.results[row + 2 * _inference_mode()].take()  # (an inference tensor only in that mode)
            if address is not None:
                at(address, kept[4], add)
            elif xn is not None:
                call.unchecked(xn, kept[4], add)
            else:
                self.b_in.copy_(x)
                call.unchecked(self.b, kept[4], add)
            out = kept[0]  # held here before the lock goes: no other call takes this buffer now
        finally:
            lock.release()
        return out if bias is None or add is not None else torch.add(out, bias)  # (dtype promotion as dense)

    def _bias_view(self, bias):
        """The bias as a NumPy array the kernel's rows add to (kept while the bias keeps its storage), or
        None where it is not a contiguous ``(out,)`` CPU tensor of the result's dtype."""
        kept = self.bias
        if kept[0] is bias and kept[1] == bias.data_ptr() and kept[2] == bias.shape:
            return kept[3]
        view = None
        if bias.device.type == "cpu" and bias.dtype == self.out_dtype and bias.shape == (self.rows_out,) \
                and bias.is_contiguous() and not (bias.is_conj() or bias.is_neg()):
            view = bias.detach().numpy()
        self.bias = (bias, bias.data_ptr(), bias.shape, view)
        return view

    def _one_copied(self, x, bias, row: bool):
        """:meth:`one` through the plan's own buffers: ``x`` copied in, the result (plus the bias) copied
        out into the kept result buffer (a bias :meth:`_bias_view` does not take: a new tensor)."""
        with self.lock:
            if self.wide is not None:
                self.wide[0].copy_(self.wide[1])
            self.b_in.copy_(x)
            array = self.product()
            add = None if bias is None else self._bias_view(bias)
            if bias is not None and add is None:
                views = self.out if array is self.out[0] else self._views(array)
                return torch.add(views[2] if row else views[1], bias)
            kept = self.results[row + 2 * _inference_mode()].take()
            y = kept[1][0] if row else kept[1]
            if add is None:
                np.copyto(y, array)
            else:
                np.add(array, add, out=y)
            return kept[0]

    def _views(self, array) -> tuple:
        """The torch views of the Matmul's result buffer (the same array every call: they are kept)."""
        out = to_torch(array)
        self.out = (array, out, out.view(1, -1) if self.batch == 1 else None)
        return self.out


def linear(x, weight: TorchUST, bias):
    """``F.linear(x, weight, bias)`` by a planned Matmul, or None where this path does not apply
    (autograd to record, CUDA, a sparse input, a 0-D input, a bias that is a TorchUST)."""
    ust = weight._ust
    if type(x) is not torch.Tensor or ust is None or not x.is_cpu or not ENABLED["on"]:
        return None
    if _grad_enabled():
        with torch._C.DisableTorchFunctionSubclass():
            if x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad):
                return None
    if bias is not None and type(bias) not in _DENSE and (not isinstance(bias, torch.Tensor) or isinstance(bias, TorchUST)):
        return None  # (isinstance on a tensor costs ~150 ns: the common types are checked first)
    shape, dtype = x.shape, x.dtype
    last = weight.__dict__.get("_last")  # _last() inlined: this is the per-call path
    if last is None or last[0] is not ust or last[2] is not dtype or last[1] != shape:
        # a new storage, shape or dtype: check that the product is defined before planning
        if len(shape) == 0 or len(ust.shape) != 2 or shape[-1] != ust.shape[1]:
            return None
        last = _remember(x, weight)
    if last[5] is not None:  # the common call: straight to the plan
        return last[4].one(x, bias, last[5])
    return _call(x, shape, last, bias, False)


def planned_linear(x, weight: TorchUST, bias, *, contiguous: bool = False, kept: bool = False):
    """``F.linear(x, weight, bias)`` (dense CPU ``x`` and ``bias``) through the weight's planned Matmul;
    ``contiguous``: a batch-major result in row-major order (a copy instead of a transposed view);
    ``kept``: at batch 1 the result may be the plan's kept buffer (``_Plan.one``), for a caller whose
    result no autograd node takes (one would mark the kept tensor itself)."""
    shape = x.shape
    last = _last(weight, x, shape)
    last = last if last is not None else _remember(x, weight)
    plan = last[4]
    if kept and plan.exact and x.dtype is last[3] and len(shape) <= 2:
        return plan.one(x, bias, len(shape) == 2)
    return _call(x, shape, last, bias, contiguous)


def _last(weight: TorchUST, x, shape):
    """``(storage, input shape, input dtype, dtype, plan, row)`` of the weight's last call if ``x`` can reuse
    it; ``row``: None unless ``plan.one`` takes such an ``x`` (then whether ``x`` is ``(1, rows)``)."""
    last = weight.__dict__.get("_last")
    if last is not None and last[0] is weight._ust and last[2] is x.dtype and last[1] == shape:
        return last
    return None


def _remember(x, weight: TorchUST) -> tuple:
    dtype, plan = _plan_for(x, weight)
    one = plan.exact and x.dtype is dtype and x.dim() <= 2
    weight._last = last = (weight.ust, x.shape, x.dtype, dtype, plan, x.dim() == 2 if one else None)
    return last


def _call(x, shape, last: tuple, bias, contiguous: bool):
    dtype, plan = last[3], last[4]
    if x.dtype != dtype:
        x = x.to(dtype)
    dims = len(shape)
    if plan.batch == 1:  # (out_features,), or (1, out_features) for a 2-D x
        if dims <= 2:
            return plan.run(x, dtype, bias, row=dims == 2)
        return plan.run(x.reshape(-1), dtype, bias).view(*shape[:-1], last[0].shape[0])
    out = plan.run(x if dims == 2 else x.reshape(-1, shape[-1]), dtype, bias)
    out = out.t()  # (out_features, batch): the batch-major result, transposed (a view)
    if contiguous:
        out = out.contiguous()
    return out if dims == 2 else out.reshape(*shape[:-1], last[0].shape[0])


def _plan_for(x, weight: TorchUST):
    """``(dtype, plan)``: the dtype ``F.linear(x, weight)`` computes in and the weight's plan for ``x``'s
    batch and that dtype (made, and kept with the weight's storage, on first use)."""
    shape, ust = x.shape, weight.ust
    dtype = x.dtype if x.dtype == weight._v.dtype else torch.promote_types(x.dtype, weight._v.dtype)
    batch = x.numel() // shape[-1] if shape[-1] else _numel(shape[:-1])
    plans = _PLANS.get(ust)
    if plans is None:
        plans = _PLANS[ust] = {}
    key = (batch, dtype)
    plan = plans.get(key)
    if plan is None:
        if len(plans) >= _MAX_SHAPES:
            plans.pop(next(iter(plans)))
        with torch.inference_mode(False):  # its buffers' torch views are written under no_grad too
            plan = plans[key] = _Plan(weight, shape[-1], batch, dtype)
    return dtype, plan


def _numel(shape) -> int:
    total = 1
    for n in shape:
        total *= n
    return total
