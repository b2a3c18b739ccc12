"""``@ustc.jit``: kernels written as index-notation statements in a Python function body.

    >>> import numpy as np, ustc
    >>> @ustc.jit
    ... def spmv(y, A, x):
    ...     y[i] += A[i, j] * x[j]
    >>> A = ustc.Tensor.from_dense(np.array([[1., 0, 2], [0, 3, 0]]), "CSR")
    >>> spmv(np.zeros(2), A, np.ones(3)).tolist()
    [3.0, 3.0]

The body may hold statements ``T[idx] = expr`` and ``T[idx] += expr`` with
``+ - *``, unary minus, numeric constants and scalar parameters; an index that
appears only on the right is summed over. Names that are not parameters are
index variables.

Other reductions (semirings, :mod:`ustc.codegen.semiring`): a statement folds
into its output with ``+=``, ``*=``, ``|=`` (or), ``&=`` (and), or
``y[i] = min(y[i], expr)`` / ``max(y[i], expr)`` / ``f(y[i], expr)``; the
fold names the semiring — ``min`` and ``max`` multiply with ``+`` (min-plus,
max-plus), ``|`` with ``&``, ``&`` with ``|``, ``*`` with ``*`` — unless the
decorator names one (``@ustc.jit(semiring="max_times")``), which every
statement's fold must then match, and under which ``T[idx] = expr`` reduces
with its ⊕ from its ``𝟘``:

    >>> @ustc.jit
    ... def relax(d, A, x):
    ...     d[i] = min(d[i], A[i, j] + x[j])     # one Bellman-Ford step
    >>> W = ustc.Tensor.from_dense(np.array([[0., 4, 0], [0, 0, 1], [0, 0, 0]]), "CSR")
    >>> relax(np.array([0., np.inf, np.inf]), W, np.array([0., np.inf, 1.])).tolist()
    [0.0, 2.0, inf]

(``W[0, 0]`` is not stored, so ``d[0]`` meets only ``4 + inf``; the sparse
operand's absent entries are ``+inf`` and take no part in ``+``.) Calls:
``min(a, b)`` and ``max(a, b)``; a Python or ``numba.njit`` function of one
argument is applied to the stored values of its argument (a prolog), of two
or more is called as it is (a user ⊗ of the decorator's semiring, say); the
functions are inlined into the generated kernel. ``epilog=h`` applies ``h`` to
every element of each output after the last statement that writes it (a dict
``{"y": h}`` names the outputs). The function is never run as Python: its source is parsed
once, at decoration, into a :class:`~codegen.notation.Program`; each call
specialises the kernel for the operands' formats, dtypes and target (cached in
memory and on disk, see ``ustc.cache``). Outputs are updated in place (dense
arrays, ustc Tensors) or created (an output argument given as a format); the
call returns the output, or a tuple of them.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import functools
import inspect
import textwrap

from ..errors import KernelError, UstcError
from ..codegen import functions
from ..codegen import notation as nt
from ..codegen.semiring import PLUS_TIMES, Semiring, as_semiring
from . import runtime

#: the semiring a fold names when the decorator names none (its ⊗ for each ⊕)
DEFAULT_MUL = {"plus": "times", "times": "times", "min": "plus", "max": "plus", "or": "and", "and": "or"}
_AUG = {ast.Add: "plus", ast.Mult: "times", ast.BitOr: "or", ast.BitAnd: "and"}

RESERVED = frozenset({"acc", "found", "emit", "np", "njit", "prange", "PLAN", "min", "max"})


def jit(fn=None, *, target: str = "cpu", semiring=None, epilog=None):
    """Decorator (``@ustc.jit`` or ``@ustc.jit(target="cpu", semiring=..., epilog=...)``) making an
    index-notation kernel. ``semiring``: a name (``"min_plus"``), a :class:`ustc.Semiring` or a
    dict (see the module docstring); ``epilog``: a one-argument function, or a dict from output
    names to functions, applied to each output element after the last statement writing it."""
    if fn is None:
        return functools.partial(jit, target=target, semiring=semiring, epilog=epilog)
    return Kernel(fn, target, semiring, epilog)


class Kernel:
    """A compiled-on-demand index-notation kernel; call it like the decorated function."""

    def __init__(self, fn, target: str = "cpu", semiring=None, epilog=None):
        self.fn, self.target = fn, target
        self.signature = inspect.signature(fn)
        try:
            declared = None if semiring is None else as_semiring(semiring)
        except UstcError as exc:
            raise KernelError(f"{fn.__name__}: {exc}") from None
        self.program = with_epilogs(parse_function(fn, declared), epilog, fn.__name__)
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        bindings = self._bind(args, kwargs)
        results = runtime.execute(self.program, bindings, self.target)
        outs = [results[name] for name in self.program.outputs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def inspect_source(self, *args, **kwargs) -> str:
        """The generated kernel module for these operands (formats, dtypes, target)."""
        return runtime.source(self.program, self._bind(args, kwargs), self.target)

    def _bind(self, args, kwargs) -> dict:
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise KernelError(f"{self.fn.__name__}(): {exc}") from None
        bound.apply_defaults()
        return dict(bound.arguments)

    def __repr__(self) -> str:
        return f"<ustc.jit kernel {self.fn.__name__}: {self.program}>"


def with_epilogs(program: nt.Program, epilog, where: str = "kernel") -> nt.Program:
    """``program`` with ``epilog`` (a function for every output, or ``{output: function}``) on the
    last statement writing each output."""
    if epilog is None:
        return program
    outputs = program.outputs
    chosen = epilog if isinstance(epilog, dict) else {name: epilog for name in outputs}
    unknown = sorted(set(chosen) - set(outputs))
    if unknown:
        raise KernelError(f"{where}: epilog for {unknown[0]!r}, which no statement writes (outputs: "
                          f"{', '.join(outputs)})")
    statements = list(program.statements)
    for name, h in chosen.items():
        k = max(n for n, st in enumerate(statements) if st.lhs.tensor == name)
        try:
            statements[k] = dataclasses.replace(statements[k], epilog=functions.function(h, 1, "epilog"))
        except UstcError as exc:
            raise KernelError(f"{where}: {exc}") from None
    return nt.Program(tuple(statements))


def parse_function(fn, semiring: Semiring | None = None) -> nt.Program:
    """The index-notation program of ``fn``'s body (folds and reductions under ``semiring``
    where the decorator names one); KernelError points at the offending line."""
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as exc:
        raise KernelError(f"cannot read the source of {getattr(fn, '__name__', fn)!r}: {exc}") from None
    text = textwrap.dedent("".join(lines))
    tree = ast.parse(text)
    node = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    parser = _Parser(node, fn.__code__.co_filename, first, text.splitlines(), _namespace(fn), semiring)
    return parser.program()


def _namespace(fn) -> dict:
    """What names in ``fn``'s body refer to (builtins, module globals, closure cells)."""
    try:
        cv = inspect.getclosurevars(fn)
    except (TypeError, ValueError):
        return {}
    return {**vars(builtins), **cv.globals, **cv.nonlocals}


class _Parser:
    def __init__(self, node: ast.FunctionDef, filename: str, first: int, lines: list[str],
                 namespace: dict | None = None, semiring: Semiring | None = None):
        self.node, self.filename, self.first, self.lines = node, filename, first, lines
        self.namespace = namespace or {"min": builtins.min, "max": builtins.max}
        self.semiring = semiring
        args = node.args
        if args.vararg or args.kwarg:
            self.fail(node, "index-notation kernels take named parameters only (no *args / **kwargs)")
        self.params = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
        self.tensors: dict[str, int] = {}  # name -> rank
        self.scalars: set[str] = set()
        self.indices: set[str] = set()

    def fail(self, node, message: str):
        line = getattr(node, "lineno", 1)
        col = getattr(node, "col_offset", 0)
        src = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        raise KernelError(f"{self.filename}:{self.first + line - 1}:{col + 1}: {message}\n    {src.strip()}")

    def loc(self, node) -> nt.Location:
        return (self.first + node.lineno - 1, node.col_offset + 1)

    def program(self) -> nt.Program:
        statements = []
        for k, stmt in enumerate(self.node.body):
            if k == 0 and isinstance(stmt, ast.Expr) and isinstance(getattr(stmt, "value", None), ast.Constant) \
                    and isinstance(stmt.value.value, str):
                continue  # docstring
            if isinstance(stmt, ast.Pass):
                continue
            statements.append(self.statement(stmt))
        if not statements:
            self.fail(self.node, "the kernel body has no index-notation statement")
        overlap = self.indices & (set(self.params) | self.scalars)
        if overlap:
            self.fail(self.node, f"'{sorted(overlap)[0]}' is used both as an index and as a parameter")
        return nt.Program(tuple(statements))

    def statement(self, stmt) -> nt.Statement:
        fold, value = None, getattr(stmt, "value", None)
        if isinstance(stmt, ast.Assign):
            if len(stmt.targets) != 1:
                self.fail(stmt, "assign to one tensor per statement")
            target = stmt.targets[0]
            fold, value = self.fold_call(target, stmt.value)
        elif isinstance(stmt, ast.AugAssign):
            fold = _AUG.get(type(stmt.op))
            if fold is None:
                self.fail(stmt, "only '=' and '+=' statements are supported, and the folds '*=', '|=', '&=', "
                                "y[i] = min(y[i], ...), y[i] = max(y[i], ...)")
            target = stmt.target
        else:
            self.fail(stmt, f"expected 'T[i, ...] = expression' or '+=', got {type(stmt).__name__.lower()}")
        if not isinstance(target, ast.Subscript):
            self.fail(stmt, "the left-hand side must be a tensor access such as y[i]")
        lhs = self.access(target)
        if len(set(lhs.indices)) != len(lhs.indices):
            self.fail(target, f"output {lhs} repeats an index")
        rhs = self.expr(value)
        return nt.Statement(lhs, rhs, fold is not None, self.loc(stmt), self.semiring_of(stmt, fold))

    def fold_call(self, target, value):
        """``(fold, expr)`` for ``T[idx] = min(T[idx], expr)`` (also ``max``, a user function of two
        arguments, and either argument order); ``(None, value)`` for any other statement."""
        if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and len(value.args) == 2
                and not value.keywords and isinstance(target, ast.Subscript)):
            return None, value
        same = [k for k, a in enumerate(value.args) if ast.unparse(a) == ast.unparse(target)]
        if not same:
            return None, value
        fn = self.callee(value)
        fold = fn.__name__ if fn in (builtins.min, builtins.max) else self.user(fn, 2, value, "fold")
        return fold, value.args[1 - same[0]]

    def semiring_of(self, stmt, fold) -> Semiring:
        """The statement's semiring: the decorator's (its ⊕ must be the fold), else the one the fold
        names (``DEFAULT_MUL``)."""
        declared = self.semiring
        if declared is not None:
            if fold is not None and fold != declared.add:
                want = declared.add if isinstance(declared.add, str) else f"the function {declared.add.name}"
                self.fail(stmt, f"the kernel's semiring {declared.name} folds with {want}; this statement "
                                f"folds with {fold if isinstance(fold, str) else fold.name}")
            return declared
        if fold is None or fold == "plus":
            return PLUS_TIMES
        if not isinstance(fold, str):
            self.fail(stmt, f"folding with the function {fold.name} needs its identity: name the semiring, "
                            f"@ustc.jit(semiring=ustc.Semiring(add={fold.name}, mul=..., zero=...))")
        return Semiring(fold, DEFAULT_MUL[fold])

    def callee(self, node: ast.Call):
        name = node.func.id
        if name in self.params:
            self.fail(node, f"unsupported expression: '{name}' is a parameter of the kernel, not a function")
        if name not in self.namespace:
            self.fail(node, f"unknown function '{name}'")
        return self.namespace[name]

    def user(self, fn, nargs: int, node, role: str) -> functions.Function:
        try:
            return functions.function(fn, nargs, f"{node.func.id} ({role})")
        except UstcError as exc:
            self.fail(node, str(exc))

    def access(self, node: ast.Subscript) -> nt.Access:
        if not isinstance(node.value, ast.Name):
            self.fail(node, "only named tensors can be indexed")
        name = node.value.id
        if name not in self.params:
            self.fail(node, f"unknown tensor '{name}' (not a parameter of the kernel)")
        if name in self.scalars:
            self.fail(node, f"'{name}' is used both as a scalar and as a tensor")
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        indices = []
        for item in items:
            if not isinstance(item, ast.Name):
                self.fail(item, f"indices must be names such as i, j (in {name}[...])")
            if item.id in self.params:
                self.fail(item, f"'{item.id}' is a parameter of the kernel, not an index")
            if item.id in RESERVED or item.id.startswith(("n_", "v_")):
                self.fail(item, f"'{item.id}' is reserved; choose another index name")
            indices.append(item.id)
        rank = self.tensors.setdefault(name, len(indices))
        if rank != len(indices):
            self.fail(node, f"'{name}' is indexed with {len(indices)} indices here but {rank} elsewhere")
        if len(set(indices)) != len(indices):
            self.fail(node, f"{name}[{', '.join(indices)}] repeats an index (diagonals are not supported)")
        self.indices.update(indices)
        return nt.Access(name, tuple(indices), self.loc(node))

    def expr(self, node) -> nt.Expr:
        if isinstance(node, ast.BinOp):
            op = {ast.Add: nt.Add, ast.Sub: nt.Sub, ast.Mult: nt.Mul, ast.BitAnd: nt.And,
                  ast.BitOr: nt.Or}.get(type(node.op))
            if op is None:
                self.fail(node, f"operator {type(node.op).__name__} is not supported (use + - * & |)")
            return op(self.expr(node.left), self.expr(node.right))
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.keywords:
                self.fail(node, "call functions by name with positional arguments: f(A[i, j]), min(a, b)")
            fn = self.callee(node)
            args = [self.expr(a) for a in node.args]
            if fn in (builtins.min, builtins.max):
                if len(args) != 2:
                    self.fail(node, f"{node.func.id}() takes two arguments here")
                return (nt.Min if fn is builtins.min else nt.Max)(*args)
            if not args:
                self.fail(node, f"{node.func.id}() needs an argument")
            user = self.user(fn, len(args), node, "a user function")
            return nt.Apply(user, args[0]) if len(args) == 1 else nt.Call(user, tuple(args))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = self.expr(node.operand)
            return nt.Neg(inner) if isinstance(node.op, ast.USub) else inner
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, complex)) \
                and not isinstance(node.value, bool):
            return nt.Literal(node.value)
        if isinstance(node, ast.Subscript):
            return self.access(node)
        if isinstance(node, ast.Name):
            if node.id not in self.params:
                self.fail(node, f"unknown name '{node.id}' (not a parameter of the kernel)")
            if node.id in self.tensors:
                self.fail(node, f"'{node.id}' is a tensor here but used as a scalar")
            self.scalars.add(node.id)
            return nt.Scalar(node.id)
        self.fail(node, f"unsupported expression ({type(node).__name__}); use tensor accesses, numbers, "
                        f"scalar parameters, + - * & |, unary minus, min / max and function calls")
