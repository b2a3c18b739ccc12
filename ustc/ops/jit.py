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
index variables. The function is never run as Python: its source is parsed
once, at decoration, into a :class:`~codegen.notation.Program`; each call
specialises the kernel for the operands' formats, dtypes and target (cached in
memory and on disk, see ``ustc.cache``). Outputs are updated in place (dense
arrays, ustc Tensors) or created (an output argument given as a format); the
call returns the output, or a tuple of them.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap

from ..errors import KernelError
from ..codegen import notation as nt
from . import runtime

RESERVED = frozenset({"acc", "found", "emit", "np", "njit", "prange", "PLAN", "min", "max"})


def jit(fn=None, *, target: str = "cpu"):
    """Decorator (``@ustc.jit`` or ``@ustc.jit(target="cpu")``) making an index-notation kernel."""
    if fn is None:
        return functools.partial(jit, target=target)
    return Kernel(fn, target)


class Kernel:
    """A compiled-on-demand index-notation kernel; call it like the decorated function."""

    def __init__(self, fn, target: str = "cpu"):
        self.fn, self.target = fn, target
        self.signature = inspect.signature(fn)
        self.program = parse_function(fn)
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


def parse_function(fn) -> nt.Program:
    """The index-notation program of ``fn``'s body; KernelError points at the offending line."""
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as exc:
        raise KernelError(f"cannot read the source of {getattr(fn, '__name__', fn)!r}: {exc}") from None
    text = textwrap.dedent("".join(lines))
    tree = ast.parse(text)
    node = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    parser = _Parser(node, fn.__code__.co_filename, first, text.splitlines())
    return parser.program()


class _Parser:
    def __init__(self, node: ast.FunctionDef, filename: str, first: int, lines: list[str]):
        self.node, self.filename, self.first, self.lines = node, filename, first, lines
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
        if isinstance(stmt, ast.Assign):
            if len(stmt.targets) != 1:
                self.fail(stmt, "assign to one tensor per statement")
            target, accumulate = stmt.targets[0], False
        elif isinstance(stmt, ast.AugAssign):
            if not isinstance(stmt.op, ast.Add):
                self.fail(stmt, "only '=' and '+=' statements are supported")
            target, accumulate = stmt.target, True
        else:
            self.fail(stmt, f"expected 'T[i, ...] = expression' or '+=', got {type(stmt).__name__.lower()}")
        if not isinstance(target, ast.Subscript):
            self.fail(stmt, "the left-hand side must be a tensor access such as y[i]")
        lhs = self.access(target)
        if len(set(lhs.indices)) != len(lhs.indices):
            self.fail(target, f"output {lhs} repeats an index")
        rhs = self.expr(stmt.value)
        return nt.Statement(lhs, rhs, accumulate, self.loc(stmt))

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
            op = {ast.Add: nt.Add, ast.Sub: nt.Sub, ast.Mult: nt.Mul}.get(type(node.op))
            if op is None:
                self.fail(node, f"operator {type(node.op).__name__} is not supported (use + - *)")
            return op(self.expr(node.left), self.expr(node.right))
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
                        f"scalar parameters, + - * and unary minus")
