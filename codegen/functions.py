"""User functions inside generated kernels: prologs, epilogs and semiring operators.

A :class:`Function` wraps a Numba-compilable Python function (a ``def``, a ``lambda``, or a
``numba.njit`` dispatcher, whose ``py_func`` is used) under a *key*. Index notation refers to
it by key (``relu#3fa2c1d0e4b5(y[i])``), so the key enters the statement text and through it
the kernel cache key: a kernel built for one function is never returned for another.

The key is stable across processes when it can be: sha256 over the function's code object
(bytecode, constants with nested code objects recursively, names, argument counts and flags),
its defaults, the values of its closure cells and the module globals its code names —
numbers, strings, bools, None, NumPy scalars and dtypes, tuples of these, modules (by name) and
other functions (by their own key). A function that reads anything else (an array, an arbitrary
object, a class) through a closure or a global cannot be keyed by its text: its key is
``local-<id>-<n>``, unique in this process, ``Function.stable`` is False, and kernels that use it
are compiled in memory and never written to the on-disk kernel cache (``ustc.ops.runtime``).

Every Function is registered here by key. The generated module asks for it at import
(``relu = _ustc_function("<key>", "cpu")``): :func:`resolve` returns ``numba.njit`` of the
function on the CPU and ``numba.cuda.jit(device=True)`` of it on CUDA, so the kernel calls it
like any other jitted function (Numba inlines small ones). Without a CUDA driver (``ustc compile
--target cuda --emit ptx``, the PTX tests) Numba cannot ask the device for its compute capability
when it types a device function; such a device function is then compiled for :data:`NO_DRIVER_CC`
(the PTX tests' sm_90), which the kernel's own PTX target overrides when they are linked.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import threading
import types
from dataclasses import dataclass, field

import numpy as np

from ustc.errors import KernelError, UstcError

_LOCK = threading.Lock()
_REGISTRY: dict[str, "Function"] = {}
_RESOLVED: dict[tuple[str, str], object] = {}
_LOCAL = itertools.count(1)
NO_DRIVER_CC = (9, 0)


@dataclass(frozen=True)
class Function:
    """A user function as the compiler sees it: equal when the keys are (see the module docstring).

    ``name`` is a readable identifier (the function's ``__name__``, ``lambda`` for lambdas),
    ``key`` identifies the code, ``arity`` is its number of positional parameters and ``py`` the
    Python function itself (not part of equality)."""

    name: str
    key: str
    arity: int
    py: object = field(default=None, compare=False, hash=False, repr=False)

    @property
    def stable(self) -> bool:
        """Whether the key is derived from the function's code (else process-local)."""
        return not self.key.startswith("local-")

    def __str__(self) -> str:
        return f"{self.name}#{self.key[:12]}"

    @property
    def host(self):
        """The function as Python calls it on the host (a Numba dispatcher's ``py_func``)."""
        return getattr(self.py, "py_func", self.py)

    def __call__(self, *args):
        return self.host(*args)


def function(fn, arity: int | None = None, what: str = "function") -> Function:
    """``fn`` as a registered :class:`Function` (a Function is returned as it is).

    ``arity``, when given, is the number of positional parameters ``fn`` must take; ``what``
    names the role in error messages (``"epilog"``, ``"semiring add"``). Raises
    :class:`ustc.UstcError` for objects that are not Python functions or Numba dispatchers
    (builtins and NumPy ufuncs: wrap them, ``lambda v: abs(v)``)."""
    if isinstance(fn, Function):
        if arity is not None and fn.arity != arity:
            raise UstcError(f"{what} must take {arity} argument(s); {fn.name} takes {fn.arity}")
        return fn
    py = getattr(fn, "py_func", fn)
    if not isinstance(py, types.FunctionType):
        raise UstcError(f"{what} must be a Python function or a numba.njit function, got {fn!r} "
                        f"(wrap builtins and NumPy ufuncs: lambda v: abs(v))")
    code = py.__code__
    if code.co_flags & (0x04 | 0x08) or code.co_kwonlyargcount:
        raise UstcError(f"{what} {py.__name__} must take positional parameters only (no *args, **kwargs)")
    n = code.co_argcount
    if arity is not None and n != arity:
        raise UstcError(f"{what} must take {arity} argument(s); {py.__name__} takes {n}")
    key = _key(py)
    name = re.sub(r"\W", "_", py.__name__) if py.__name__ != "<lambda>" else "lambda"
    if not name.isidentifier() or name[0] == "_":
        name = "fn" + name
    out = Function(name, key, n, fn)
    with _LOCK:
        known = _REGISTRY.get(key)
        if known is None or known.py is not fn:
            _REGISTRY[key] = out  # the newest object with this code: equal code, equal kernel
    return out


def lookup(key: str) -> Function:
    """The registered function of ``key``; KernelError when this process has not seen it (a
    generated module imported before the program that uses it was built)."""
    with _LOCK:
        found = _REGISTRY.get(key)
    if found is None:
        raise KernelError(f"no user function with key {key} is registered in this process; build the "
                          f"operation (ustc.jit, einsum, Matmul.plan) that uses it before loading its kernel")
    return found


def resolve(key: str, target: str):
    """The jitted form of function ``key`` for ``target`` (``"cpu"``: ``numba.njit``;
    ``"cuda"``: ``numba.cuda.jit(device=True)``), made once per process."""
    with _LOCK:
        done = _RESOLVED.get((key, target))
    if done is not None:
        return done
    fn = lookup(key).py
    if target == "cuda":
        from numba import cuda

        out = _driverless(cuda.jit(device=True)(getattr(fn, "py_func", fn)))
    else:
        import numba
        from numba.core.registry import CPUDispatcher

        out = fn if isinstance(fn, CPUDispatcher) else numba.njit(nogil=True)(getattr(fn, "py_func", fn))
    with _LOCK:
        _RESOLVED[(key, target)] = out
    return out


def _driverless(dispatcher):
    """``dispatcher`` (a CUDA device function) compiling for :data:`NO_DRIVER_CC` when no driver
    can tell the current device's compute capability (module docstring); the simulator's
    device functions are returned as they are."""
    compile_device = getattr(dispatcher, "compile_device", None)
    if compile_device is None:
        return dispatcher

    def compile_without_driver(args, return_type=None):
        from numba.cuda import dispatcher as module
        from numba.cuda.cudadrv.error import CudaSupportError

        try:
            return compile_device(args, return_type)
        except CudaSupportError:
            with _LOCK:
                real = module.get_current_device
                module.get_current_device = lambda: _NoDriverDevice
                try:
                    return compile_device(args, return_type)
                finally:
                    module.get_current_device = real

    dispatcher.compile_device = compile_without_driver
    return dispatcher


class _NoDriverDevice:
    compute_capability = NO_DRIVER_CC


def apply_inplace(fn: Function, values: np.ndarray) -> np.ndarray:
    """``values[k] = fn(values[k])`` for every element of a host array (any shape), in place
    through a flat view (a copy written back when ``values`` is not contiguous)."""
    flat = values.reshape(-1) if values.flags.c_contiguous else values.ravel()
    if flat.size:
        _apply_kernel()(resolve(fn.key, "cpu"), flat)
    if not values.flags.c_contiguous:
        values[...] = flat.reshape(values.shape)
    return values


_APPLY = []


def _apply_kernel():
    if not _APPLY:
        import numba

        @numba.njit(nogil=True)
        def apply(f, flat):  # pragma: no cover - compiled
            for k in range(flat.shape[0]):
                flat[k] = f(flat[k])

        _APPLY.append(apply)
    return _APPLY[0]


# -- keys ---------------------------------------------------------------------------------

class _Unstable(Exception):
    """The function reads a value that has no stable text."""


def _key(py) -> str:
    try:
        digest = hashlib.sha256()
        _function(py, digest, set())
        return digest.hexdigest()[:24]
    except _Unstable:
        return f"local-{id(py):x}-{next(_LOCAL)}"


def _function(py, digest, seen: set) -> None:
    if id(py) in seen:
        digest.update(b"<recursive>")
        return
    seen.add(id(py))
    code = py.__code__
    _code(code, digest)
    digest.update(b"defaults" + _value(py.__defaults__, seen).encode())
    for cell in py.__closure__ or ():
        try:
            contents = cell.cell_contents
        except ValueError:  # an empty cell (a name assigned later)
            raise _Unstable() from None
        digest.update(b"cell" + _value(contents, seen).encode())
    globals_ = py.__globals__
    for name in sorted(_names(code)):
        if name in globals_:
            digest.update(f"global {name}=".encode() + _value(globals_[name], seen).encode())


def _code(code, digest) -> None:
    digest.update(code.co_code)
    digest.update(repr((code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags,
                        code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars)).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _code(const, digest)
        else:
            digest.update(f"{type(const).__name__}:{const!r}".encode())


def _names(code) -> set[str]:
    out = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out |= _names(const)
    return out


def _value(v, seen: set) -> str:
    """Stable text of a value a function reads, or _Unstable."""
    if v is None or isinstance(v, (bool, int, float, complex, str, bytes)):
        return f"{type(v).__name__}:{v!r}"
    if isinstance(v, np.generic):
        return f"np.{v.dtype}:{v!r}"
    if isinstance(v, np.dtype):
        return f"dtype:{v}"
    if isinstance(v, tuple):
        return "(" + ",".join(_value(x, seen) for x in v) + ")"
    if isinstance(v, types.ModuleType):
        return f"module:{v.__name__}"
    if isinstance(v, type) and v.__module__ in ("builtins", "numpy"):
        return f"type:{v.__module__}.{v.__qualname__}"
    if isinstance(v, (types.BuiltinFunctionType, np.ufunc)):
        return f"builtin:{getattr(v, '__module__', '')}.{v.__name__}"
    py = getattr(v, "py_func", v)
    if isinstance(py, types.FunctionType):
        digest = hashlib.sha256()
        _function(py, digest, seen)
        return f"function:{digest.hexdigest()}"
    raise _Unstable()
