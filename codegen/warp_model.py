"""A lock-step model of a CUDA launch: every thread of the grid, lane by lane, in NumPy.

Numba's CUDA simulator runs each thread as a Python thread; warps there are not lock-step
and ``shfl_*_sync`` is ustc's own patch, so a kernel whose lanes diverge before a shuffle,
read a lane outside the mask, or race on a plain store can pass it. This model runs the
*generated source* of a ``cuda.jit`` kernel (the text the GPU compiles, not the loop IR
it came from) as single-instruction multiple-thread code:

* each variable holds one value per thread of the launch (``blocks * threads``); each
  statement runs for the threads in a boolean mask, as one instruction for the warp;
* ``if`` runs its branches one after the other with the mask split; ``for`` / ``while``
  iterate while any thread is still in the loop; ``break``, ``continue`` and ``return``
  drop threads from the mask;
* loads and stores are bounds-checked gathers / scatters, atomics apply in lane order,
  and plain accesses of one element by two threads are a race (:class:`warp_lanes.Memory`);
* warp intrinsics act on the 32 lanes of each warp (:mod:`codegen.warp_lanes`):
  ``shfl_sync`` / ``shfl_up_sync`` / ``shfl_down_sync`` / ``shfl_xor_sync``,
  ``ballot_sync``, ``all_sync`` / ``any_sync``, ``activemask``, ``syncwarp``, ``laneid``.

Warps run together; a grid in which they ran in another order would differ only through
a race, which the model refuses. ``cuda.syncthreads`` needs every live thread of a block;
shared and local arrays are not modelled (no generated kernel uses them).

:class:`Kernel` stands in for a dispatcher (``kernel[blocks, threads, stream](*args)``);
:func:`launch` runs a generated module's launch wrapper with its kernels modelled.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import operator
import textwrap
import types
from dataclasses import dataclass

import numpy as np

from . import warp_lanes as wl
from .warp_lanes import WARP, ModelError, lanes_of

BINARY = {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply, ast.Div: np.true_divide,
          ast.FloorDiv: np.floor_divide, ast.Mod: np.remainder, ast.BitAnd: np.bitwise_and,
          ast.BitOr: np.bitwise_or, ast.BitXor: np.bitwise_xor, ast.LShift: np.left_shift,
          ast.RShift: np.right_shift, ast.Pow: np.power}
COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
           ast.Eq: operator.eq, ast.NotEq: operator.ne}
FULL = 0xFFFFFFFF
#: libdevice's bit casts (bfloat16 kernels, ``codegen.cuda_bfloat16``), per thread
BIT_CASTS = {"int_as_float": lambda w: np.asarray(w).astype(np.int64).astype(np.uint32).view(np.float32),
             "float_as_int": lambda v: np.asarray(v).astype(np.float32).view(np.int32)}


@dataclass
class Stats:
    """What one modelled launch did (for tests: were the warp paths exercised?)."""

    name: str
    blocks: int
    threads: int
    shuffles: int = 0          # warp-wide shuffle instructions executed (per warp)
    divergent_branches: int = 0
    atomics: int = 0
    statements: int = 0


@dataclass
class _Loop:
    broken: np.ndarray
    continued: np.ndarray


@dataclass
class _Intrinsic:
    """A ``cuda.*`` function of the model: called with the executing mask first."""

    fn: object
    name: str


class _Namespace(types.SimpleNamespace):
    pass


def _bool(value, n: int) -> np.ndarray:
    return lanes_of(value, n).astype(bool)


def written_arrays(fn: ast.FunctionDef) -> set[str]:
    """Names the kernel stores into (``a[...] = ``, ``a[...] += ``, ``cuda.atomic.*(a, ...)``)."""
    out = set()
    for node in ast.walk(fn):
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                    out.add(t.value.id)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "atomic" and \
                node.args and isinstance(node.args[0], ast.Name):
            out.add(node.args[0].id)
    return out


class Kernel:
    """A ``cuda.jit`` kernel run by the model: ``Kernel(dispatcher)[blocks, threads, stream](*args)``."""

    def __init__(self, dispatcher, log: list | None = None):
        self.py_func = getattr(dispatcher, "py_func", dispatcher)
        tree = ast.parse(textwrap.dedent(inspect.getsource(self.py_func)))
        self.fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
        self.written = written_arrays(self.fn)
        self.log = log

    def __getitem__(self, config):
        blocks, threads = config[0], config[1]
        if not all(isinstance(c, (int, np.integer)) for c in (blocks, threads)):
            raise ModelError("the model runs 1-D grids only")
        if blocks < 1 or threads < 1:
            raise ModelError(f"launch of {blocks} blocks of {threads} threads")
        return lambda *args: self.run(int(blocks), int(threads), args)

    def run(self, blocks: int, threads: int, args) -> Stats:
        names = [a.arg for a in self.fn.args.args]
        if len(args) != len(names):
            raise ModelError(f"{self.fn.name} takes {len(names)} arguments, got {len(args)}")
        launch = _Launch(self, blocks, threads, dict(zip(names, args)))
        launch.execute()
        if self.log is not None:
            self.log.append(launch.stats)
        return launch.stats


def _closure(fn) -> dict:
    """The names a kernel made by a factory closes over (its compile-time constants: ``n``, ``width``)."""
    return {name: cell.cell_contents for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ())}


class _Launch:
    """The state of one launch: per-thread variables, memories, masks of exited threads."""

    def __init__(self, kernel: Kernel, blocks: int, threads: int, args: dict):
        # a block is whole warps of lanes; lanes past `threads` (a block of 1 thread) never run
        self.padded = -(-threads // WARP) * WARP
        self.kernel, self.n = kernel, blocks * self.padded
        self.globals = {**kernel.py_func.__globals__, **_closure(kernel.py_func)}
        self.stats = Stats(kernel.fn.name, blocks, threads)
        self.env = {}
        for name, value in args.items():
            self.env[name] = wl.Memory(name, value, name in kernel.written) if isinstance(value, np.ndarray) else value
        self.tid = np.arange(self.n)            # a lane's number in the launch (the race detector's thread)
        self.local, self.block_of = self.tid % self.padded, self.tid // self.padded
        self.returned = self.local >= threads   # never launched
        self.loops: list[_Loop] = []
        self.gridded = self.block_of * threads + self.local
        self.cuda = self._cuda_namespace(blocks, threads)

    # -- the cuda namespace the kernel sees ---------------------------------------------------
    def _cuda_namespace(self, blocks: int, threads: int):
        dim3 = lambda x: _Namespace(x=x, y=0, z=0)  # noqa: E731
        ns = _Namespace(threadIdx=dim3(self.local), blockIdx=dim3(self.block_of), blockDim=dim3(threads),
                        gridDim=dim3(blocks), laneid=self.local % WARP, warpsize=WARP)
        intrinsics = {"grid": self._grid, "gridsize": self._gridsize, "shfl_sync": self._shfl("idx"),
                      "shfl_up_sync": self._shfl("up"), "shfl_down_sync": self._shfl("down"),
                      "shfl_xor_sync": self._shfl("xor"), "ballot_sync": self._ballot,
                      "all_sync": self._vote(all), "any_sync": self._vote(any), "activemask": self._activemask,
                      "syncwarp": self._syncwarp, "syncthreads": self._syncthreads, "popc": self._popc}
        for name, fn in intrinsics.items():
            setattr(ns, name, _Intrinsic(fn, name))
        ns.atomic = _Namespace(**{op: _Intrinsic(self._atomic(op), f"atomic.{op}") for op in ("add", "min", "max")})
        return ns

    def _grid(self, mask, ndim):
        if ndim != 1:
            raise ModelError("cuda.grid: the model runs 1-D grids only")
        return self.gridded

    def _gridsize(self, mask, ndim):
        if ndim != 1:
            raise ModelError("cuda.gridsize: the model runs 1-D grids only")
        return self.stats.blocks * self.stats.threads

    def _shfl(self, kind):
        def shfl(mask, member_mask, value, operand):
            lane = self.local % WARP
            k = lanes_of(operand, self.n).astype(np.int64)
            if kind == "down":
                src = np.where(lane + k < WARP, lane + k, -1)
            elif kind == "up":
                src = np.where(lane - k >= 0, lane - k, -1)
            elif kind == "xor":
                src = (lane ^ k) & (WARP - 1)
            else:
                src = k & (WARP - 1)
            self.stats.shuffles += int(np.count_nonzero(mask.reshape(-1, WARP).any(axis=1)))
            return wl.shuffle(mask, member_mask, value, src, f"shfl_{kind}_sync")
        return shfl

    def _ballot(self, mask, member_mask, predicate):
        return wl.ballot(mask, member_mask, predicate)

    def _vote(self, fold):
        def vote(mask, member_mask, predicate):
            bits = wl.ballot(mask, member_mask, predicate).astype(np.int64)
            members = lanes_of(member_mask, self.n).astype(np.int64) & FULL
            return (bits == members) if fold is all else (bits != 0)
        return vote

    def _activemask(self, mask):
        return wl.active_bits(mask).astype(np.uint32)

    def _syncwarp(self, mask, member_mask=FULL):
        wl.sync_warp(mask, member_mask)

    def _syncthreads(self, mask):
        live = (~self.returned).reshape(-1, self.padded)
        here = mask.reshape(-1, self.padded)
        if np.any(here.any(axis=1) & np.any(live & ~here, axis=1)):
            raise ModelError("syncthreads: some live threads of a block do not reach it (divergent)")

    def _popc(self, mask, value):
        v = lanes_of(value, self.n).astype(np.uint64)
        return np.array([bin(int(x)).count("1") for x in v], np.int64)

    def _atomic(self, op):
        def atomic(mask, memory, index, value):
            if not isinstance(memory, wl.Memory):
                raise ModelError(f"cuda.atomic.{op} of a non-array")
            self.stats.atomics += int(np.count_nonzero(mask))
            index = index if isinstance(index, tuple) else (index,)
            return memory.atomic(op, index, value, mask)
        return atomic

    # -- statements -------------------------------------------------------------------------
    def execute(self) -> None:
        mask = ~self.returned
        with np.errstate(all="ignore"):
            self.block(self.kernel.fn.body, mask)

    def block(self, body, mask: np.ndarray) -> np.ndarray:
        """Run ``body`` for ``mask``; returns the threads that reach its end."""
        for s in body:
            if not mask.any():
                break
            mask = self.stmt(s, mask)
        return mask

    def stmt(self, s, mask: np.ndarray) -> np.ndarray:
        self.stats.statements += 1
        handler = getattr(self, "_" + type(s).__name__, None)
        if handler is None:
            raise ModelError(f"line {s.lineno}: the model does not run {type(s).__name__} statements")
        return handler(s, mask)

    def _Expr(self, s, mask):
        if not (isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)):  # a docstring
            self.expr(s.value, mask)
        return mask

    def _Pass(self, s, mask):
        return mask

    def _Assign(self, s, mask):
        value = self.expr(s.value, mask)
        for target in s.targets:
            self.assign(target, value, mask)
        return mask

    def _AugAssign(self, s, mask):
        op = BINARY[type(s.op)]
        current = self.expr(s.target if isinstance(s.target, ast.Name) else
                            ast.Subscript(s.target.value, s.target.slice, ast.Load()), mask)
        self.assign(s.target, self._binary(op, current, self.expr(s.value, mask), mask, s), mask)
        return mask

    def assign(self, target, value, mask: np.ndarray) -> None:
        if isinstance(target, ast.Name) and isinstance(value, tuple):  # a vector load: one array a value
            old = self.env.get(target.id) or (None,) * len(value)
            self.env[target.id] = tuple(np.where(mask, v, 0 if o is None else o) for v, o in zip(value, old))
        elif isinstance(target, ast.Name):
            if mask.all():
                self.env[target.id] = value
            else:   # threads outside the mask keep their value (zero where they had none yet)
                old = self.env.get(target.id)
                self.env[target.id] = np.where(mask, value, np.zeros((), np.asarray(value).dtype) if old is None else old)
        elif isinstance(target, ast.Tuple) and isinstance(value, tuple) and len(value) == len(target.elts):
            for t, v in zip(target.elts, value):  # a, b = ldg2(...): one value per name
                self.assign(t, v, mask)
        elif isinstance(target, ast.Subscript):
            memory = self._memory(target.value)
            memory.store(self._index(target.slice, mask), value, mask)
        else:
            raise ModelError(f"line {target.lineno}: cannot assign to {type(target).__name__}")

    def _If(self, s, mask):
        test = _bool(self.expr(s.test, mask), self.n) & mask
        rest = mask & ~test
        if np.any(test.reshape(-1, WARP).any(axis=1) & rest.reshape(-1, WARP).any(axis=1)):
            self.stats.divergent_branches += 1      # some warp runs both sides, one after the other
        return self.block(s.body, test) | self.block(s.orelse, rest)

    def _loop(self, body, live: np.ndarray) -> np.ndarray:
        """One iteration for ``live``; returns the threads that go on to the next one."""
        self.loops.append(_Loop(np.zeros(self.n, bool), np.zeros(self.n, bool)))
        try:
            done = self.block(body, live)
        finally:
            loop = self.loops.pop()
        return done | loop.continued   # threads that broke out are in neither

    def _For(self, s, mask):
        call = s.iter
        if s.orelse or not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == range.__name__):
            raise ModelError(f"line {s.lineno}: the model runs 'for ... in range(...)' loops only")
        args = [self.expr(a, mask) for a in call.args]
        start, stop, step = (0, args[0], 1) if len(args) == 1 else (*args, 1) if len(args) == 2 else args
        step = lanes_of(step, self.n).astype(np.int64)
        if np.any(mask & (step == 0)):
            raise ModelError(f"line {s.lineno}: range() step 0")
        cur = lanes_of(start, self.n).astype(np.int64).copy()
        stop = lanes_of(stop, self.n)
        inside = lambda c: np.where(step > 0, c < stop, c > stop)  # noqa: E731
        live = mask & inside(cur)
        while live.any():
            self.assign(s.target, cur, live)
            going = self._loop(s.body, live)
            cur = np.where(going, cur + step, cur)
            live = going & inside(cur)
        return mask & ~self.returned

    def _While(self, s, mask):
        if s.orelse:
            raise ModelError(f"line {s.lineno}: while ... else is not modelled")
        live = mask & _bool(self.expr(s.test, mask), self.n)
        while live.any():
            going = self._loop(s.body, live)
            live = going & _bool(self.expr(s.test, going), self.n)
        return mask & ~self.returned

    def _Break(self, s, mask):
        self.loops[-1].broken |= mask
        return np.zeros(self.n, bool)

    def _Continue(self, s, mask):
        self.loops[-1].continued |= mask
        return np.zeros(self.n, bool)

    def _Return(self, s, mask):
        if s.value is not None:
            raise ModelError(f"line {s.lineno}: a kernel returns no value")
        self.returned |= mask
        return np.zeros(self.n, bool)

    # -- expressions ------------------------------------------------------------------------
    def expr(self, e, mask: np.ndarray):
        handler = getattr(self, "_e" + type(e).__name__, None)
        if handler is None:
            raise ModelError(f"line {e.lineno}: the model does not evaluate {type(e).__name__}")
        return handler(e, mask)

    def _eConstant(self, e, mask):
        return e.value

    def _eName(self, e, mask):
        if e.id in self.env:
            return self.env[e.id]
        value = self.globals.get(e.id, getattr(builtins, e.id, None))
        if value is None:
            raise ModelError(f"line {e.lineno}: name {e.id!r} is not defined (or read before it is set)")
        if isinstance(value, types.ModuleType) and value.__name__ == "numba.cuda":
            return self.cuda
        return value

    def _eAttribute(self, e, mask):
        base = self.expr(e.value, mask)
        if isinstance(base, wl.Memory):
            return {"shape": base.array.shape, "size": base.array.size, "ndim": base.array.ndim}[e.attr]
        try:
            return getattr(base, e.attr)
        except AttributeError:
            raise ModelError(f"line {e.lineno}: {e.attr!r} is not modelled") from None

    def _eTuple(self, e, mask):
        return tuple(self.expr(x, mask) for x in e.elts)

    def _eSubscript(self, e, mask):
        base = self.expr(e.value, mask)
        if isinstance(base, tuple):   # arr.shape[k]
            return base[self.expr(e.slice, mask)]
        if not isinstance(base, wl.Memory):
            raise ModelError(f"line {e.lineno}: subscript of a non-array")
        return base.load(self._index(e.slice, mask), mask)

    def _memory(self, e) -> wl.Memory:
        memory = self.expr(e, None)
        if not isinstance(memory, wl.Memory):
            raise ModelError(f"line {e.lineno}: store into a non-array")
        return memory

    def _index(self, e, mask) -> tuple:
        index = self.expr(e, mask)
        return index if isinstance(index, tuple) else (index,)

    def _binary(self, op, left, right, mask, e):
        if op in (np.floor_divide, np.remainder) and np.asarray(right).dtype.kind in "iu":
            zero = mask & (lanes_of(right, self.n) == 0)
            if zero.any():
                raise ModelError(f"line {e.lineno}: integer division by zero (thread {int(np.nonzero(zero)[0][0])})")
        return op(left, right)

    def _eBinOp(self, e, mask):
        return self._binary(BINARY[type(e.op)], self.expr(e.left, mask), self.expr(e.right, mask), mask, e)

    def _eUnaryOp(self, e, mask):
        value = self.expr(e.operand, mask)
        if isinstance(e.op, ast.Not):
            return np.logical_not(value)
        return {ast.USub: np.negative, ast.UAdd: np.positive, ast.Invert: np.invert}[type(e.op)](value)

    def _eBoolOp(self, e, mask):
        """``and`` / ``or`` per thread, short-circuit: the right side runs only where it decides."""
        result = _bool(self.expr(e.values[0], mask), self.n)
        for v in e.values[1:]:
            pending = mask & (result if isinstance(e.op, ast.And) else ~result)
            if not pending.any():
                continue
            right = _bool(self.expr(v, pending), self.n)
            result = np.where(pending, right, result)
        return result

    def _eCompare(self, e, mask):
        left = self.expr(e.left, mask)
        result = np.ones(self.n, bool)
        for op, right_e in zip(e.ops, e.comparators):
            right = self.expr(right_e, mask & result)
            result = result & _bool(COMPARE[type(op)](left, right), self.n)
            left = right
        return result

    def _eIfExp(self, e, mask):
        test = _bool(self.expr(e.test, mask), self.n)
        yes = self.expr(e.body, mask & test) if (mask & test).any() else 0
        no = self.expr(e.orelse, mask & ~test) if (mask & ~test).any() else 0
        return np.where(test, yes, no)

    def _eCall(self, e, mask):
        fn = self.expr(e.func, mask)
        if e.keywords:
            raise ModelError(f"line {e.lineno}: keyword arguments are not modelled")
        args = [self.expr(a, mask) for a in e.args]
        if isinstance(fn, _Intrinsic):
            return fn.fn(mask, *args)
        return self._call(fn, args, mask, e)

    def _call(self, fn, args, mask, e):
        lanes = getattr(fn, "lanes", None)
        if lanes is not None:  # a load intrinsic (codegen.cuda_loads) on the model's checked memory
            return lanes(mask, *args)
        if isinstance(fn, type) and issubclass(fn, np.generic):          # np.intp(x), np.float64(x): wraps
            cast = np.asarray(args[0]).astype(fn)
            return cast if cast.ndim else cast[()]
        if fn in (min, max):
            fold = np.minimum if fn is min else np.maximum
            out = args[0]
            for a in args[1:]:
                out = fold(out, a)
            return out
        if fn in (int, float, bool):
            kind = {int: np.int64, float: np.float64, bool: np.bool_}[fn]
            return np.asarray(args[0]).astype(kind) if isinstance(args[0], np.ndarray) else fn(args[0])
        if fn is abs:
            return np.abs(args[0])
        if fn is len:
            if not isinstance(args[0], wl.Memory):
                raise ModelError(f"line {e.lineno}: len() of a non-array")
            return args[0].array.shape[0]
        if getattr(fn, "__module__", "") == "numba.cuda.libdevice" and fn.__name__ in BIT_CASTS:
            return BIT_CASTS[fn.__name__](args[0])
        if isinstance(fn, np.ufunc) or getattr(fn, "__module__", "") in ("math", "numpy"):
            return getattr(np, fn.__name__)(*args)                       # math.sqrt -> np.sqrt, per thread
        if hasattr(fn, "py_func"):                                      # a device function: thread by thread
            return self._device(fn.py_func, args, mask)
        raise ModelError(f"line {e.lineno}: calls of {fn!r} are not modelled")

    def _device(self, py_func, args, mask):
        threads = np.nonzero(mask)[0]
        per = [lanes_of(a, self.n) for a in args]
        values = [py_func(*(p[t] for p in per)) for t in threads]
        out = np.zeros(self.n, np.asarray(values).dtype if values else np.float64)
        out[threads] = values
        return out


def launch(module, name: str, wrapper, *args, log: list | None = None, **kwargs):
    """Call ``wrapper`` (a generated ``launch_kernel_k``) with ``module.<name>`` modelled; each
    launch's :class:`Stats` is appended to ``log``."""
    kernel = getattr(module, name)
    setattr(module, name, Kernel(kernel, log))
    try:
        return wrapper(*args, **kwargs)
    finally:
        setattr(module, name, kernel)
