"""Named operations and ``--expr`` statements as index-notation programs (for ``ustc compile``).

    >>> program, formats, ranks = operation("spmv", ["CSR"])
    >>> str(program), formats["x"], ranks["A"]
    ('y[i] = A[i, j] * x[j]', None, 2)
    >>> str(parse_expr("C[i, j] += A[i, j] * B[i, k] * D[k, j]"))
    'C[i, j] += A[i, j] * B[i, k] * D[k, j]'

:func:`operation` returns the program, a format per tensor (a
:class:`~ustc.format.ir.TensorFormat` for a sparse tensor, ``None`` for a dense
array) and a rank per tensor:

=========  ==========================================  =========================================
op         program                                     formats
=========  ==========================================  =========================================
spmv       ``y[i] = A[i, j] * x[j]``                   A sparse; x, y dense
spmm       ``C[i, k] = A[i, j] * B[j, k]``             A sparse; B, C dense
sddmm      ``C[i, j] = A[i, j] * B[i, k] * D[k, j]``   A sparse, C in A's format; B, D dense
add        ``C[i, ...] = A[i, ...] + B[i, ...]``       A, B sparse (B: the second FORMAT, else
                                                       A's); C in A's format (the union's
                                                       format when A's cannot hold any pattern)
mul        ``C[i, ...] = A[i, ...] * B[i, ...]``       as add; C in A's format
sum        ``s[kept] = A[i, ...]``                     A sparse; s dense (``axis`` or all)
convert    ``B[i, ...] = A[i, ...]``                   A sparse; B in the ``to`` format
=========  ==========================================  =========================================

:func:`parse_expr` / :func:`parse_program` read statements such as
``C[i, j] = A[i, j] * B[i, k] * D[k, j]`` with the same parser as ``@ustc.jit``
(:class:`ustc.ops.jit._Parser`): names indexed with ``[...]`` are tensors,
names inside the brackets are index variables, any other name is a scalar
parameter. The text is only parsed, never run.
"""

from __future__ import annotations

import ast
import difflib
from typing import Sequence

from ..errors import KernelError, UstcError
from ..format.ir import TensorFormat
from ..tensor.tensor import as_format
from ..codegen import notation as nt
from .jit import _Parser

#: op name -> (how many FORMATs it takes: (least, most), one-line description)
OPERATIONS: dict[str, tuple[tuple[int, int], str]] = {
    "spmv": ((1, 1), "y[i] = A[i, j] * x[j]"),
    "spmm": ((1, 1), "C[i, k] = A[i, j] * B[j, k]"),
    "sddmm": ((1, 1), "C[i, j] = A[i, j] * B[i, k] * D[k, j]  (C in A's format)"),
    "add": ((1, 2), "C = A + B elementwise  (B in the second FORMAT, else A's; C sparse)"),
    "mul": ((1, 2), "C = A * B elementwise  (B in the second FORMAT, else A's; C in A's format)"),
    "sum": ((1, 1), "s = A summed over --axis N, or over all axes  (s dense)"),
    "convert": ((1, 1), "B = A with B in the --to format"),
}

_LETTERS = "ijklmnopqrstuvwxyzabcdefgh"


def _indices(rank: int) -> tuple[str, ...]:
    return tuple(_LETTERS[k] if k < len(_LETTERS) else f"i{k}" for k in range(rank))


def _statement(lhs: nt.Access, rhs: nt.Expr) -> nt.Program:
    return nt.Program((nt.Statement(lhs, rhs),))


def _product(*accesses: nt.Access) -> nt.Expr:
    expr: nt.Expr = accesses[0]
    for a in accesses[1:]:
        expr = nt.Mul(expr, a)
    return expr


def _matrix(op: str, fmt: TensorFormat) -> None:
    if fmt.ndim != 2:
        raise UstcError(f"{op} needs a 2-D format for A, got {fmt.ndim}-D {fmt}")


def operation(op: str, formats: Sequence, to=None, axis: int | None = None
              ) -> tuple[nt.Program, dict[str, TensorFormat | None], dict[str, int]]:
    """The named operation ``op`` on operands in ``formats`` (TensorFormats or DSL text / names).

    Returns ``(program, {tensor: TensorFormat or None (dense)}, {tensor: rank})``. ``to`` is
    the output format of ``convert``; ``axis`` the summed axis of ``sum`` (None: all axes).
    Raises :class:`~ustc.errors.UstcError` for an unknown op, a wrong number of formats, a
    missing or misplaced ``to`` / ``axis``, or formats of the wrong rank.
    """
    _check_call(op, formats, to, axis)
    fmts = [as_format(f) for f in formats]
    if op in ("spmv", "spmm", "sddmm"):
        _matrix(op, fmts[0])
    extra = {"convert": to, "sum": axis}.get(op)
    return _BUILDERS[op](fmts, extra) if op in ("convert", "sum") else _BUILDERS[op](fmts, op)


def _check_call(op: str, formats: Sequence, to, axis) -> None:
    if op not in OPERATIONS:
        close = difflib.get_close_matches(op, OPERATIONS, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise UstcError(f"unknown operation '{op}'{hint}; operations: {', '.join(OPERATIONS)}")
    (least, most), _ = OPERATIONS[op]
    if not least <= len(formats) <= most:
        wanted = str(least) if least == most else f"{least} or {most}"
        raise UstcError(f"{op} takes {wanted} FORMAT{'s' if most > 1 else ''}, got {len(formats)}")
    if to is not None and op != "convert":
        raise UstcError(f"--to applies to convert only, not {op}")
    if axis is not None and op != "sum":
        raise UstcError(f"--axis applies to sum only, not {op}")


def _spmv(fmts, _op):
    program = _statement(nt.Access("y", ("i",)), _product(nt.Access("A", ("i", "j")), nt.Access("x", ("j",))))
    return program, {"y": None, "A": fmts[0], "x": None}, {"y": 1, "A": 2, "x": 1}


def _spmm(fmts, _op):
    program = _statement(nt.Access("C", ("i", "k")), _product(nt.Access("A", ("i", "j")), nt.Access("B", ("j", "k"))))
    return program, {"C": None, "A": fmts[0], "B": None}, {"C": 2, "A": 2, "B": 2}


def _sddmm(fmts, _op):
    A = fmts[0]
    program = _statement(nt.Access("C", ("i", "j")), _product(nt.Access("A", ("i", "j")), nt.Access("B", ("i", "k")),
                                                              nt.Access("D", ("k", "j"))))
    return program, {"C": A, "A": A, "B": None, "D": None}, {"C": 2, "A": 2, "B": 2, "D": 2}


def _elementwise(fmts, op):
    """``add`` / ``mul``: C in A's format (for add, the union's format where A's cannot hold every pattern)."""
    A = fmts[0]
    B = fmts[1] if len(fmts) > 1 else A
    if B.ndim != A.ndim:
        raise UstcError(f"{op}: A is {A.ndim}-D ({A}) but B is {B.ndim}-D ({B})")
    idx = _indices(A.ndim)
    node = nt.Add if op == "add" else nt.Mul
    program = _statement(nt.Access("C", idx), node(nt.Access("A", idx), nt.Access("B", idx)))
    if op == "add":
        from .elementwise import union_format

        C = union_format(A, B)
    else:
        C = A
    return program, {"C": C, "A": A, "B": B}, {"C": A.ndim, "A": A.ndim, "B": A.ndim}


def _sum(fmts, axis):
    A = fmts[0]
    idx = _indices(A.ndim)
    if axis is None:
        keep: tuple[str, ...] = ()
    else:
        if not -A.ndim <= axis < A.ndim:
            raise UstcError(f"--axis {axis} is out of range for a {A.ndim}-D format")
        keep = tuple(i for d, i in enumerate(idx) if d != axis % A.ndim)
    program = _statement(nt.Access("s", keep), nt.Access("A", idx))
    return program, {"s": None, "A": A}, {"s": len(keep), "A": A.ndim}


def _convert(fmts, to):
    A = fmts[0]
    if to is None:
        raise UstcError("convert needs --to FORMAT (the output format)")
    B = as_format(to)
    if B.ndim != A.ndim:
        raise UstcError(f"convert: A is {A.ndim}-D ({A}) but --to is {B.ndim}-D ({B})")
    idx = _indices(A.ndim)
    program = _statement(nt.Access("B", idx), nt.Access("A", idx))
    return program, {"B": B, "A": A}, {"B": A.ndim, "A": A.ndim}


#: op -> builder(formats, extra) of (program, formats, ranks); extra: ``to``, ``axis`` or the op name
_BUILDERS = {"spmv": _spmv, "spmm": _spmm, "sddmm": _sddmm, "add": _elementwise, "mul": _elementwise,
             "sum": _sum, "convert": _convert}


def parse_program(texts: Sequence[str] | str, filename: str = "<expr>") -> nt.Program:
    """The program of one or more statements (``T[i, ...] = expr`` or ``+=``), one per text.

    Errors are :class:`~ustc.errors.KernelError` naming ``filename:line:column`` (the line is
    the statement's number) with the offending text.
    """
    if isinstance(texts, str):
        texts = [texts]
    lines: list[str] = []
    for text in texts:
        lines.extend(text.strip().splitlines() or [""])
    source = "\n".join(lines)
    try:
        tree = ast.parse(source, filename, mode="exec")
    except SyntaxError as exc:
        line = exc.lineno or 1
        col = exc.offset or 1
        src = lines[line - 1] if 0 < line <= len(lines) else ""
        raise KernelError(f"{filename}:{line}:{col}: {exc.msg}\n    {src}\n    {' ' * (col - 1)}^") from None
    if not tree.body:
        raise KernelError(f"{filename}: no statement given (expected e.g. 'y[i] = A[i, j] * x[j]')")
    tensors: dict[str, None] = {}
    indices: set[str] = set()
    names: dict[str, None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            tensors[node.value.id] = None
            for sub in ast.walk(node.slice):
                if isinstance(sub, ast.Name):
                    indices.add(sub.id)
        elif isinstance(node, ast.Name):
            names[node.id] = None
    called = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    scalars = [n for n in names if n not in tensors and n not in indices and n not in called]  # min / max
    params = list(tensors) + scalars
    header = ast.parse(f"def kernel({', '.join(params)}):\n    pass").body[0]
    header.body = tree.body
    header.lineno, header.col_offset = 1, 0
    return _Parser(header, filename, 1, lines).program()


def parse_expr(text: str) -> nt.Statement:
    """One statement ``T[i, ...] = expr`` (or ``+=``) as a :class:`~codegen.notation.Statement`."""
    program = parse_program([text])
    if len(program.statements) != 1:
        raise KernelError(f"<expr>: expected one statement, got {len(program.statements)}")
    return program.statements[0]


def expr_operands(program: nt.Program, formats: dict[str, TensorFormat | str] | None = None
                  ) -> tuple[dict[str, TensorFormat | None], dict[str, int]]:
    """Formats (``None``: dense) and ranks of ``program``'s tensors; ``formats`` names the sparse ones."""
    formats = dict(formats or {})
    unknown = [name for name in formats if name not in program.tensors]
    if unknown:
        raise UstcError(f"--format {unknown[0]}=...: no tensor '{unknown[0]}' in the statements "
                        f"(tensors: {', '.join(program.tensors)})")
    ranks: dict[str, int] = {}
    for st in program.statements:
        for access in [st.lhs, *st.rhs.accesses()]:
            ranks.setdefault(access.tensor, len(access.indices))
    out: dict[str, TensorFormat | None] = {}
    for name in program.tensors:
        fmt = as_format(formats[name]) if name in formats else None
        if fmt is not None and fmt.ndim != ranks[name]:
            raise UstcError(f"--format {name}=...: the format is {fmt.ndim}-D but {name} is indexed with "
                            f"{ranks[name]} indices")
        out[name] = fmt
    return out, ranks
