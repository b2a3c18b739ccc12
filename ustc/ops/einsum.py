"""``ustc.einsum``: NumPy's subscript notation over dense and sparse operands.

    >>> import numpy as np, ustc
    >>> A = ustc.Tensor.from_dense(np.array([[1., 0, 2], [0, 3, 0]]), "CSR")
    >>> ustc.einsum("ij,j->i", A, np.ones(3)).tolist()
    [3.0, 3.0]
    >>> ustc.einsum("ij->ji", A, out_format="CSR").to_dense().tolist()
    [[1.0, 0.0], [0.0, 3.0], [2.0, 0.0]]

The subscripts become one index-notation statement ``out[...] = T0[...] * T1[...]``
lowered like any other kernel; without ``->`` the output takes the indices that
appear once, in alphabetical order (NumPy's rule). Dense-only calls go to
``numpy.einsum`` (unless they name a semiring, prologs or an epilog).

``semiring="min_plus"`` (a name, :class:`ustc.Semiring` or dict) multiplies the
operands with its ⊗ and reduces with its ⊕, absent entries being its ``𝟘``
(:mod:`ustc.codegen.semiring`); ``prologs={0: f}`` applies ``f`` to the stored
values of operand 0 as they are read; ``epilog=h`` applies ``h`` to every
element of the result (every stored entry of a sparse one):

    >>> W = ustc.Tensor.from_dense(np.array([[0., 1, 5], [0, 0, 2], [0, 0, 0]]), "CSR")
    >>> ustc.einsum("ij,jk->ik", W, W, semiring="min_plus", out_format="CSR").entries()[1].tolist()
    [3.0]
"""

from __future__ import annotations

import functools
import string
from dataclasses import dataclass

import numpy as np

from ..errors import KernelError, ShapeError, UnsupportedOperation
from ..tensor import packages
from ..tensor.tensor import Tensor, as_format
from ..codegen import functions
from ..codegen import notation as nt
from ..codegen.functions import Function
from ..codegen.semiring import Semiring, as_semiring
from . import runtime
from .operands import OperandKind, dense_operand, kind
from .plan_cache import ELEMENTWISE, KernelPlan


@functools.lru_cache(maxsize=256)   # a repeated call names the same subscripts
def _parsed(subscripts: str, count: int) -> tuple[tuple[str, ...], str]:
    terms, out = parse_subscripts(subscripts, count)
    return tuple(terms), out


def parse_subscripts(subscripts: str, count: int) -> tuple[list[str], str]:
    """``("ij,j->i", 2)`` → ``(["ij", "j"], "i")``, checked."""
    text = subscripts.replace(" ", "")
    if "." in text:
        raise UnsupportedOperation("einsum ellipsis ('...') is not supported; name every index")
    lhs, arrow, out = text.partition("->")
    terms = lhs.split(",")
    if len(terms) != count:
        raise KernelError(f"einsum subscripts {subscripts!r} name {len(terms)} operands, {count} were given")
    for term in terms + [out]:
        bad = [c for c in term if c not in string.ascii_letters]
        if bad:
            raise KernelError(f"einsum subscripts {subscripts!r}: {bad[0]!r} is not an index letter")
    for term in terms:
        if len(set(term)) != len(term):
            raise UnsupportedOperation(f"einsum term {term!r} repeats an index (diagonals are not supported)")
    if not arrow:
        counts = {c: lhs.count(c) for c in set(lhs.replace(",", ""))}
        out = "".join(sorted(c for c, n in counts.items() if n == 1))
    if len(set(out)) != len(out):
        raise KernelError(f"einsum output {out!r} repeats an index")
    missing = set(out) - set("".join(terms))
    if missing:
        raise KernelError(f"einsum output index {sorted(missing)[0]!r} appears in no operand")
    return terms, out


def einsum(subscripts: str, *operands, out_format=None, target: str = "cpu", semiring=None, prologs=None,
           epilog=None):
    """Evaluate ``subscripts`` over ``operands`` (ustc Tensors, NumPy arrays, CPU torch tensors).

    Returns a NumPy array, or a ustc Tensor in ``out_format`` when one is given. A Tensor
    whose levels are all dense is a dense operand (its array). ``semiring``: the (⊕, ⊗) to
    reduce and multiply with (default plus-times); ``prologs``: ``{operand number: f}`` (or a
    sequence with None for operands without one), each ``f`` applied to the stored values of
    its operand; ``epilog``: applied to every element (entry) of the result. The functions
    are Numba-compilable Python functions of one argument, inlined into the kernel.
    """
    terms, out = _parsed(subscripts, len(operands))
    sr = as_semiring(semiring)
    loads = _prologs(prologs, len(operands))
    post = None if epilog is None else functions.function(epilog, 1, "einsum epilog")
    operands = [dense_operand(op) for op in operands]     # all-dense Tensors are dense operands
    sparse = [isinstance(op, Tensor) for op in operands]
    if not any(sparse) and out_format is None and sr.is_plus_times and not loads and post is None:
        return np.einsum(subscripts, *[packages.host_array(op) for op in operands])
    operands = [_operand(op) for op in operands]
    names = [f"T{k}" for k in range(len(operands))]
    fmt = None if out_format is None else as_format(out_format)
    copied = _copy(terms, out, operands, fmt, target, sr, loads, post)
    if copied is not None:
        return copied
    key = EinsumKey(terms, out, tuple(kind(op) for op in operands), None if fmt is None else fmt.signature,
                    target, sr, tuple(sorted(loads.items())), post)
    plan = ELEMENTWISE.get(key)
    if plan is not None:
        return plan.execute(dict(zip(names, operands)), {})["out"]
    program = _program(terms, out, names, loads, sr, post)
    bindings = dict(zip(names, operands))
    if fmt is None:
        bindings["out"] = np.zeros(_shape(terms, out, operands), dtype=sr.result_dtype(_dtype(operands)))
    else:
        bindings["out"] = fmt
    run = runtime.prepare(program, bindings, target)
    results = run.run()
    if run.target == "cpu" and key.stable:
        ELEMENTWISE.put(key, KernelPlan.of(program, run))
    return results["out"]


def _copy(terms, out: str, operands, fmt, target: str, sr: Semiring, loads: dict, post) -> Tensor | None:
    """An einsum that only copies one stored operand, its dimensions permuted, into ``out_format``
    (``"ij->ij"``, ``"ij->ji"``): ``Tensor.convert`` of the operand (a zero-copy transposed view
    for a permutation), the path and kernels a conversion takes, instead of a plan whose walk may
    convert the operand first. None when the call is anything else. The result is new storage,
    as the kernel's would be."""
    if len(operands) != 1 or fmt is None or loads or post is not None or not sr.is_plus_times or target != "cpu":
        return None
    a = operands[0]
    if not isinstance(a, Tensor) or a.device != "cpu" or sorted(out) != sorted(terms[0]) \
            or sr.result_dtype(a.dtype) != a.dtype:
        return None
    from .elementwise import view_transposed

    perm = tuple(terms[0].index(c) for c in out)
    view = a if perm == tuple(range(a.ndim)) else view_transposed(a, perm)
    result = view.convert(fmt)
    if result is view:  # already in that format: a copy of its own
        result = view.copy()
    result = result.with_package(None)  # as the generated kernel's results
    return result


def _operand(x):
    """A Tensor as it is; a host array-like (NumPy, CPU torch, lists) as a NumPy view; device
    arrays as they are (the cuda target binds them)."""
    if isinstance(x, Tensor) or packages.is_cupy(x) or (packages.is_torch(x) and x.device.type != "cpu"):
        return x
    return packages.host_array(x)


@dataclass(frozen=True)
class EinsumKey:
    """The plan key of one einsum: its parsed subscripts, the operands' kinds, the output format
    (signature, or None for a dense result), target, semiring, prologs and epilog."""

    terms: tuple[str, ...]
    out: str
    operands: tuple[OperandKind, ...]
    out_format: str | None
    target: str
    semiring: Semiring
    prologs: tuple[tuple[int, Function], ...]
    epilog: Function | None

    @property
    def stable(self) -> bool:
        """Every user function has a code-derived key (a process-local key is new at every
        call, so a plan under it would never be found again)."""
        return all(f.stable for _, f in self.prologs) and (self.epilog is None or self.epilog.stable) \
            and self.semiring.stable


def _program(terms, out: str, names: list[str], loads: dict, sr: Semiring, post) -> nt.Program:
    """``out[...] = T0[...] ⊗ T1[...] ⊗ ...`` with the prologs applied to their operands."""
    factors: list[nt.Expr] = [nt.Access(name, tuple(term)) for name, term in zip(names, terms)]
    factors = [nt.Apply(loads[k], f) if k in loads else f for k, f in enumerate(factors)]
    rhs = factors[0]
    for factor in factors[1:]:
        rhs = sr.multiply(rhs, factor)
    return nt.Program((nt.Statement(nt.Access("out", tuple(out)), rhs, semiring=sr, epilog=post),))


def _prologs(prologs, count: int) -> dict:
    """``{operand number: Function}`` from a dict or a sequence (None: no prolog)."""
    if prologs is None:
        return {}
    items = prologs.items() if isinstance(prologs, dict) else enumerate(prologs)
    out = {}
    for k, f in items:
        if not isinstance(k, int) or not 0 <= k < count:
            raise KernelError(f"einsum prologs: {k!r} is not an operand number (0..{count - 1})")
        if f is not None:
            out[k] = functions.function(f, 1, f"einsum prolog of operand {k}")
    return out


def _shape(terms, out, operands) -> tuple[int, ...]:
    extents: dict[str, int] = {}
    for term, op in zip(terms, operands):
        shape = op.shape
        if len(shape) != len(term):
            raise ShapeError(f"einsum term {term!r} has {len(term)} indices, its operand has shape {tuple(shape)}")
        for c, n in zip(term, shape):
            if extents.setdefault(c, int(n)) != int(n):
                raise ShapeError(f"einsum index {c!r} has extents {extents[c]} and {n}")
    return tuple(extents[c] for c in out)


def _dtype(operands) -> np.dtype:
    return np.result_type(*[op.dtype if isinstance(op, Tensor) else packages.host_array(op).dtype
                            for op in operands])
