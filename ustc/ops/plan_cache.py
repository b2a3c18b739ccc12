"""The plan caches: planned products and element-wise / einsum plans, keyed by their problem.

One-shot ``ustc.matmul`` calls (and the PyTorch layer) look in the Matmul
cache first, so a repeated call with operands of the same formats, shapes,
dtypes, index dtypes, device, transposes and alpha/beta kinds pays only
``execute()``. Element-wise operators (``A + B``, ``A - B``, ``A * B``, their
ufuncs) and ``ustc.einsum`` keep their plans in :data:`ELEMENTWISE`: a hit
binds the operands' buffers and runs the kernel the plan holds. Each cache is
a bounded LRU (``maxsize`` plans, default 64); a cached plan keeps no operand
or output alive between calls.

    >>> from ustc.ops import plan_cache
    >>> sorted(plan_cache.stats())
    ['hits', 'maxsize', 'misses', 'size']
    >>> sorted(plan_cache.ELEMENTWISE.stats())
    ['hits', 'maxsize', 'misses', 'size']

The module-level functions (:func:`get`, :func:`put`, :func:`stats`, ...) are
the Matmul cache's; :func:`clear` and :func:`set_maxsize` act on every cache.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ..codegen import notation as nt
from ..tensor.tensor import Tensor
from . import runtime
from .operands import checked


class PlanCache:
    """A thread-safe bounded LRU of plans (objects with a ``release()`` method) with hit and miss
    counters."""

    def __init__(self, maxsize: int = 64):
        self._lock = threading.Lock()
        self._plans: "OrderedDict[object, object]" = OrderedDict()
        self._counts = {"hits": 0, "misses": 0}
        self._maxsize = maxsize

    def get(self, key):
        """The plan stored under ``key`` (counted as a hit), or None (a miss)."""
        with self._lock:
            plan = self._plans.get(key)
            if plan is None:
                self._counts["misses"] += 1
                return None
            self._plans.move_to_end(key)
            self._counts["hits"] += 1
            return plan

    def take(self, key):
        """Remove and return the plan stored under ``key`` (a hit), or None (a miss): for a caller
        that holds the plan a long time (an iterative solve) and gives it back with :meth:`put`;
        meanwhile the same problem elsewhere plans its own instead of waiting for it."""
        with self._lock:
            plan = self._plans.pop(key, None)
            self._counts["misses" if plan is None else "hits"] += 1
            return plan

    def put(self, key, plan) -> None:
        """Store ``plan``; the least recently used plan goes when the cache is full. Nothing is
        stored (or released) while the cache is disabled (``maxsize`` 0)."""
        with self._lock:
            if not self._maxsize:
                return
            self._plans[key] = plan
            self._plans.move_to_end(key)
            self._trim()

    def count_hit(self) -> None:
        """Count a hit a caller found through its own memo of this cache's plans."""
        with self._lock:
            self._counts["hits"] += 1

    @property
    def enabled(self) -> bool:
        return self._maxsize > 0

    def stats(self) -> dict:
        """``hits``, ``misses`` (since the last :meth:`clear`), ``size`` and ``maxsize``."""
        with self._lock:
            return dict(self._counts, size=len(self._plans), maxsize=self._maxsize)

    def clear(self) -> None:
        """Release every cached plan and zero the counters."""
        with self._lock:
            for plan in self._plans.values():
                plan.release()
            self._plans.clear()
            self._counts.update(hits=0, misses=0)

    def set_maxsize(self, n: int) -> None:
        """Bound the cache to ``n`` plans (0 disables caching)."""
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"maxsize must be a non-negative integer, got {n!r}")
        with self._lock:
            self._maxsize = n
            self._trim()

    def _trim(self) -> None:
        while len(self._plans) > self._maxsize:
            _, old = self._plans.popitem(last=False)
            old.release()


MATMUL = PlanCache()        # planned ustc.Matmul objects (one-shot ustc.matmul, the PyTorch layer)
ELEMENTWISE = PlanCache()   # element-wise operator, ufunc and einsum plans

get, take, put, stats = MATMUL.get, MATMUL.take, MATMUL.put, MATMUL.stats


def clear() -> None:
    """Release every cached plan of every cache and zero the counters."""
    for cache in (MATMUL, ELEMENTWISE):
        cache.clear()


def set_maxsize(n: int) -> None:
    """Bound every cache to ``n`` plans (0 disables caching)."""
    for cache in (MATMUL, ELEMENTWISE):
        cache.set_maxsize(n)


@dataclass(frozen=True)
class KernelPlan:
    """A generated kernel planned for operands of given kinds: ``program`` and its prepared
    :class:`~ustc.ops.runtime.Run` (kernel module loaded, index extents checked, output shapes
    and dtypes settled), holding no operand. :meth:`execute` binds new operands of the same
    kinds (formats, shapes, dtypes, index dtypes) and runs the statements; host target only.

    Build it with :meth:`of` from a Run that has executed once."""

    program: nt.Program
    run: runtime.Run

    def __post_init__(self):
        if self.run.target != "cpu" or self.run.module is None:
            raise ValueError("KernelPlan needs a loaded host (cpu) Run")
        if any(b.value is not None for b in self.run.tensors.values()) or self.run.scalars:
            raise ValueError("KernelPlan's Run must hold no operand (build it with KernelPlan.of)")
        if [st.lhs.tensor for st in self.program.statements] != list(self.program.outputs) \
                or set(self.run.tensors) != set(self.program.tensors):
            raise ValueError("KernelPlan: the Run does not bind this program's tensors")

    @classmethod
    def of(cls, program: nt.Program, run: runtime.Run) -> "KernelPlan":
        """The plan of ``run`` (prepared for ``program`` and loaded), its operands dropped."""
        template = copy.copy(run)
        template.tensors = {name: runtime.Bound(name, None, b.format, b.shape, b.dtype)
                            for name, b in run.tensors.items()}
        template.scalars = {}
        return cls(program, template)

    def execute(self, values: dict, scalars: dict) -> dict:
        """Run on ``values`` (``{name: Tensor or array}``; a dense output's array is allocated
        here, a sparse one is built) and ``scalars``; returns ``{output name: result}``. The
        operands must have the planned kinds: the caller's key guarantees it."""
        run = object.__new__(runtime.Run)      # a shallow copy (copy.copy costs several times more)
        run.__dict__.update(self.run.__dict__)
        tensors = {}
        for name, b in self.run.tensors.items():
            value = values.get(name)
            if isinstance(value, Tensor):
                checked(value)           # index buffers in bounds before the kernel reads them (cached)
            elif value is None and b.format is None:   # a dense output: "=" fills it or stores every element
                value = (np.zeros if name in self._accumulated else np.empty)(b.shape, b.dtype)
            tensors[name] = runtime.Bound(name, value, b.format, b.shape, b.dtype)
        run.tensors, run.scalars = tensors, dict(scalars)
        module = run.module
        results = {}
        for statement, plan in zip(self.program.statements, module.PLAN):
            fn = runtime.cpu_function(module, plan, run.work())
            results[statement.lhs.tensor] = run._statement(statement, plan, fn)
        return results

    @property
    def _accumulated(self) -> frozenset:
        """Outputs some statement adds to (``+=``): allocated zeroed."""
        return frozenset(st.lhs.tensor for st in self.program.statements if st.accumulate)

    def release(self) -> None:
        """Nothing to drop: the plan holds no operand."""
