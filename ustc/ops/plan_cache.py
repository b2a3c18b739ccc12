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

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from ..codegen import notation as nt
from ..codegen.plans import plans_of
from ..codegen.roles import Kind
from ..tensor.storage import Layout
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
        self.generation = 0      # changes whenever plans are dropped wholesale (clear, set_maxsize)

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
        """Count a hit a caller found through its own memo of this cache's plans (no lock: a
        counter, and the memo's callers count in microseconds)."""
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
            self.generation += 1

    def set_maxsize(self, n: int) -> None:
        """Bound the cache to ``n`` plans (0 disables caching)."""
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"maxsize must be a non-negative integer, got {n!r}")
        with self._lock:
            self._maxsize = n
            self._trim()
            self.generation += 1

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
class DirectCall:
    """A one-statement kernel with a dense output, called without the runtime's per-call work:
    the kernel functions (parallel and serial twin), each argument's source resolved at planning
    from the kernel's parameter roles (``roles``, the binder's instructions: ``("out",)``,
    ``("array", k)``, ``("pos" | "crd", k, level)``, ``("vals", k)`` of the ``k``-th input,
    ``("const", value)`` for extents and level sizes, or ``("threads",)``: the host's thread
    count, 1 for the serial twin), the output's shape,
    dtype and start value (None: the kernel stores every element). Unbatched host operands only;
    :meth:`build` returns None for anything else (conversions, aliases, epilog passes, roles it
    does not know), which then runs through the Run."""

    function: object
    serial: object
    inputs: tuple[str, ...]
    roles: tuple[tuple, ...]
    shape: tuple[int, ...]
    dtype: np.dtype
    fill: object
    scalar_inputs: frozenset = frozenset()   # input positions bound to 0-d arrays (passed as 1-element)
    call: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        if not callable(self.function) or not all(r[0] in ("out", "array", "pos", "crd", "vals", "const", "threads")
                                                  for r in self.roles):
            raise ValueError("DirectCall: a kernel and resolved argument roles are needed")
        object.__setattr__(self, "call", _binder(self.roles, len(self.inputs), self.scalar_inputs))

    @classmethod
    def build(cls, program: nt.Program, run: runtime.Run) -> "DirectCall | None":
        if len(program.statements) != 1 or run.target != "cpu":
            return None
        statement, plan = program.statements[0], plans_of(run.module)[0]
        out = run.tensors[statement.lhs.tensor]
        if out.format is not None or plan.sparse_output or plan.convert or plan.alias \
                or plan.epilog not in (None, "fused") or statement.accumulate \
                or any(b.format is not None and b.format.batch_levels for b in run.tensors.values()):
            return None
        inputs = tuple(n for n in run.tensors if n != out.name)
        roles = []
        for role in plan.params:
            kind, name = role.kind, role.tensor
            if kind is Kind.ARRAY and name == out.name:
                roles.append(("out",))
            elif kind is Kind.ARRAY and name in inputs:
                roles.append(("array", inputs.index(name)))
            elif kind is Kind.EXTENT:
                roles.append(("const", run.extents[role.index]))
            elif kind in (Kind.SIZE, Kind.LO):
                layout = Layout.of(run.tensors[name].format, run.tensors[name].shape)
                roles.append(("const", (layout.level_shape if kind is Kind.SIZE else layout.origins)[role.level]))
            elif kind in (Kind.POS, Kind.CRD):
                roles.append((kind.value, inputs.index(name), role.level))
            elif kind is Kind.VALS:
                roles.append(("vals", inputs.index(name)))
            elif kind is Kind.THREADS:
                roles.append(("threads",))
            else:
                return None                    # a role this caller does not bind: the Run binds it
        reads_self = any(a.tensor == out.name for a in statement.rhs.accesses())
        if reads_self:
            return None
        fill = None if plan.overwrites else runtime.fill_value(statement, out.dtype)
        serial = getattr(run.module, plan.serial) if plan.serial else None
        zero_d = frozenset(k for k, n in enumerate(inputs) if run.tensors[n].format is None and not run.tensors[n].shape)
        return cls(getattr(run.module, plan.function), serial, inputs, tuple(roles), out.shape, out.dtype, fill,
                   zero_d)

    def __call__(self, *values):
        """The output for ``values`` (the inputs in :attr:`inputs` order, of the planned kinds,
        their index buffers already checked)."""
        work = 0
        for v in values:
            work += v.nse if isinstance(v, Tensor) else v.size
        return self.run(self.kernel(work), *values)

    def kernel(self, work: int):
        """The function for inputs of ``work`` entries: the serial twin below ``SERIAL_WORK``."""
        return self.serial if self.serial is not None and work < runtime.SERIAL_WORK else self.function

    def run(self, fn, *values):
        """``fn`` (one of :meth:`kernel`'s) on ``values``; returns the output."""
        out = np.empty(self.shape, self.dtype)
        if self.fill is not None:
            out.fill(self.fill)
        self.call(fn, out, 1 if fn is self.serial else runtime._threads(), *values)
        return out


def _binder(roles, count: int, zero_d: frozenset):
    """``lambda fn, out, threads, v0, v1, ...: fn(<arguments>)`` with every argument's expression
    written out from ``roles`` (``v0.raw_buffer(1, "pos")``, ``out``, ``4096``; ``threads``: the chunks
    a balanced row loop splits into, 1 for the serial twin): generated once per plan,
    it binds a call in a few hundred nanoseconds where a loop over the roles costs microseconds
    (one-shot SpMV of 4,096 rows: the kernel itself takes ~18 us)."""
    parts = []
    for role in roles:
        kind = role[0]
        if kind == "const":
            parts.append(repr(int(role[1])))
        elif kind == "out":
            parts.append("out")
        elif kind == "threads":
            parts.append("threads")
        elif kind == "array":
            k = int(role[1])
            parts.append(f"v{k}.reshape(1)" if k in zero_d else f"v{k}")
        elif kind == "vals":
            parts.append(f"v{int(role[1])}.raw_values")
        else:
            parts.append(f"v{int(role[1])}.raw_buffer({int(role[2])}, {kind!r})")
    names = "".join(f", v{k}" for k in range(count))
    return eval(f"lambda fn, out, threads{names}: fn({', '.join(parts)})", {})  # noqa: S307 - text built above from ints


@dataclass(frozen=True)
class KernelPlan:
    """A generated kernel planned for operands of given kinds: ``program`` and its prepared
    :class:`~ustc.ops.runtime.Run` (kernel module loaded, index extents checked, output shapes
    and dtypes settled), holding no operand. :meth:`execute` binds new operands of the same
    kinds (formats, shapes, dtypes, index dtypes) and runs the statements (through ``direct``
    when a :class:`DirectCall` can run it); host target only.

    Build it with :meth:`of` from a Run that has its module loaded."""

    program: nt.Program
    run: runtime.Run
    direct: DirectCall | None = None

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
        template = object.__new__(runtime.Run)
        template.__dict__.update(run.__dict__)
        template.tensors = {name: runtime.Bound(name, None, b.format, b.shape, b.dtype)
                            for name, b in run.tensors.items()}
        template.scalars = {}
        direct = None if any(st.rhs.scalars() for st in program.statements) else DirectCall.build(program, template)
        return cls(program, template, direct)

    def execute(self, values: dict, scalars: dict) -> dict:
        """Run on ``values`` (``{name: Tensor or array}``; a dense output's array is allocated
        here, a sparse one is built) and ``scalars``; returns ``{output name: result}``. The
        operands must have the planned kinds: the caller's key guarantees it."""
        for value in values.values():
            if isinstance(value, Tensor):
                checked(value)           # index buffers in bounds before the kernel reads them (cached)
        if self.direct is not None:
            return {self.program.statements[0].lhs.tensor: self.direct(*(values[n] for n in self.direct.inputs))}
        run = object.__new__(runtime.Run)      # a shallow copy (copy.copy costs several times more)
        run.__dict__.update(self.run.__dict__)
        tensors = {}
        for name, b in self.run.tensors.items():
            value = values.get(name)
            if value is None and b.format is None:   # a dense output: "=" fills it or stores every element
                value = (np.zeros if name in self._accumulated else np.empty)(b.shape, b.dtype)
            tensors[name] = runtime.Bound(name, value, b.format, b.shape, b.dtype)
        run.tensors, run.scalars = tensors, dict(scalars)
        module = run.module
        results = {}
        for statement, plan in zip(self.program.statements, plans_of(module)):
            fn = runtime.cpu_function(module, plan, run.work())
            results[statement.lhs.tensor] = run._statement(statement, plan, fn)
        return results

    @property
    def _accumulated(self) -> frozenset:
        """Outputs some statement adds to (``+=``): allocated zeroed."""
        return frozenset(st.lhs.tensor for st in self.program.statements if st.accumulate)

    def release(self) -> None:
        """Nothing to drop: the plan holds no operand."""
