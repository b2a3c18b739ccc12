"""Format text → ``TensorFormat``: Lark parse, syntax dataclasses, build, located errors.

Three steps with typed boundaries:

1. ``grammar/format.lark`` (LALR) turns text into a parse tree; Lark's
   errors become :class:`FormatSyntaxError` with line, column and caret.
2. ``_ToSyntax`` (non-recursive, so deep nesting cannot overflow the stack)
   turns the tree into frozen syntax dataclasses that remember source spans.
3. ``_build`` resolves level keywords through the level registry and
   constructs the ``TensorFormat`` (whose construction is the semantic pass);
   semantic errors get the span of the level they name.

``parse`` is cached by text: a repeated parse is a dictionary look-up.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass
from typing import Sequence

from lark import Lark, Token, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError
from lark.visitors import Transformer_NonRecursive

from ..errors import FormatError, FormatSemanticError, FormatSyntaxError
from .expr import Add, Const, Dimension, Expr, FloorDiv, Mod, Mul, Sub
from .ir import TensorFormat
from .levels import BY_KEYWORD, generation
from .semantics import WIDTHS

MAX_DEPTH = 32  # deepest expression accepted; real formats need 3
MAX_CACHED = 4096


@dataclass(frozen=True)
class Span:
    line: int
    column: int
    start: int
    end: int


@dataclass(frozen=True)
class DimSyntax:
    name: str
    binding: Expr | None
    span: Span


@dataclass(frozen=True)
class LevelSyntax:
    var: str | None
    expr: Expr
    keyword: str
    keyword_span: Span
    groups: tuple
    span: Span


@dataclass(frozen=True)
class MapSyntax:
    lvars: tuple[str, ...] | None
    dims: tuple[DimSyntax, ...]
    levels: tuple[LevelSyntax, ...]
    span: Span


@dataclass(frozen=True)
class WidthSyntax:
    key: str
    value: int
    span: Span


@dataclass(frozen=True)
class NamedSyntax:
    name: str
    args: tuple
    span: Span


def _span(meta) -> Span:
    return Span(meta.line, meta.column, meta.start_pos, meta.end_pos)


def _token_span(tok: Token) -> Span:
    return Span(tok.line, tok.column, tok.start_pos, tok.end_pos)


class _ToSyntax(Transformer_NonRecursive):
    """Parse tree → syntax dataclasses and expression IR."""

    def __init__(self, text: str):
        super().__init__()
        self.text = text
        self.depth: dict[Expr, int] = {}

    def _node(self, meta, expr: Expr, *children: Expr) -> Expr:
        depth = 1 + max((self.depth.get(c, 1) for c in children), default=0)
        if depth > MAX_DEPTH:
            raise _located(FormatSemanticError(f"expression nested deeper than {MAX_DEPTH}"), _span(meta), self.text)
        self.depth[expr] = depth
        return expr

    def start(self, ch):
        return ch[0]

    def encoding(self, ch):
        return ch[1], ch[2]

    def bare(self, ch):
        return ch[0], ch[1]

    @v_args(meta=True)
    def named(self, meta, ch):
        return NamedSyntax(str(ch[0]), ch[1][1] if ch[1] else (), _span(meta))

    @v_args(meta=True)
    def map(self, meta, ch):
        lvars, dims, levels = ch
        return MapSyntax(lvars, dims, levels, _span(meta))

    def lvars(self, ch):
        return tuple(str(t) for t in ch if t is not None)

    def dims(self, ch):
        return tuple(ch)

    @v_args(meta=True)
    def dim(self, meta, ch):
        return DimSyntax(str(ch[0]), ch[1], _span(meta))

    def levels(self, ch):
        return tuple(ch)

    @v_args(meta=True)
    def level(self, meta, ch):
        var, expr, (keyword, groups) = ch
        return LevelSyntax(None if var is None else str(var), expr, str(keyword), _token_span(keyword),
                           groups, _span(meta))

    def level_type(self, ch):
        return ch[0], tuple(ch[1:])

    def paren(self, ch):
        return "(", _args(ch)

    def bracket(self, ch):
        return "[", _args(ch)

    def widths(self, ch):
        return tuple(ch)

    @v_args(meta=True)
    def width(self, meta, ch):
        return WidthSyntax(str(ch[0]), int(ch[1]), _span(meta))

    @v_args(meta=True)
    def var(self, meta, ch):
        return self._node(meta, Dimension(str(ch[0])))

    @v_args(meta=True)
    def const(self, meta, ch):
        return self._node(meta, Const(int(ch[0])))

    @v_args(meta=True)
    def neg(self, meta, ch):
        return self._node(meta, Mul(-1, ch[0]), ch[0])

    @v_args(meta=True)
    def add(self, meta, ch):
        return self._node(meta, Add(ch[0], ch[1]), *ch)

    @v_args(meta=True)
    def sub(self, meta, ch):
        return self._node(meta, Sub(ch[0], ch[1]), *ch)

    @v_args(meta=True)
    def mul(self, meta, ch):
        left, right = ch
        if isinstance(left, Const):
            return self._node(meta, Mul(left.value, right), right)
        if isinstance(right, Const):
            return self._node(meta, Mul(right.value, left), left)
        raise _located(FormatSemanticError(f"'{left} * {right}' is not affine: one factor must be a constant"),
                       _span(meta), self.text)

    @v_args(meta=True)
    def floordiv(self, meta, ch):
        return self._by_constant(meta, FloorDiv, ch, "floordiv")

    @v_args(meta=True)
    def mod(self, meta, ch):
        return self._by_constant(meta, Mod, ch, "mod")

    def _by_constant(self, meta, cls, ch, op):
        left, right = ch[0], ch[2]
        if not isinstance(right, Const):
            raise _located(FormatSemanticError(f"'{op}' needs an integer constant on its right, got '{right}'"),
                           _span(meta), self.text)
        return self._node(meta, cls(left, right.value), left)


def _args(items) -> tuple:
    return tuple(int(t) if t.type == "INT" else str(t) for t in items if t is not None)


# -- error helpers ---------------------------------------------------------------

def _located(exc: FormatSemanticError, span: Span, text: str) -> FormatSemanticError:
    lines = text.splitlines() or [""]
    source = lines[span.line - 1] if 0 < span.line <= len(lines) else ""
    return FormatSemanticError(exc.rule, level=exc.level, level_text=exc.level_text,
                               line=span.line, column=span.column, source_line=source)


def _describe(parser: Lark, names) -> tuple[str, ...]:
    readable = {"NAME": "a name", "INT": "an integer", "$END": "end of input",
                "ENCODING": "'#sparse_tensor.encoding'", "WIDTH_KEY": "posWidth or crdWidth",
                "DIVOP": "floordiv", "MODOP": "mod"}
    out = set()
    for name in names:
        if name in readable:
            out.add(readable[name])
            continue
        try:
            pattern = parser.get_terminal(name).pattern
        except KeyError:
            out.add(name)
            continue
        out.add(repr(pattern.value) if pattern.type == "str" else name)
    return tuple(sorted(out))


def _expected(parser: Lark, names, text: str) -> tuple[str, ...]:
    """Readable expected terminals; outside the MLIR wrapper its closing '}' means end of input."""
    out = set(_describe(parser, names))
    if not text.lstrip().startswith("#sparse_tensor") and {"'}'", "'>'"} & out:
        out -= {"'}'", "'>'"}
        out.add("end of input")
    return tuple(sorted(out))


def _syntax_error(exc: UnexpectedInput, text: str, parser: Lark) -> FormatSyntaxError:
    if isinstance(exc, UnexpectedCharacters):
        got = repr(text[exc.pos_in_stream]) if exc.pos_in_stream < len(text) else "end of input"
        return FormatSyntaxError(f"unexpected character {got}", text=text, line=exc.line, column=exc.column,
                                 expected=_expected(parser, exc.allowed or (), text))
    token = getattr(exc, "token", None)
    if isinstance(exc, UnexpectedEOF) or token is None or token.type == "$END":
        lines = text.splitlines() or [""]
        line, column = len(lines), len(lines[-1]) + 1
        if text.endswith("\n"):
            line, column = len(lines) + 1, 1
        return FormatSyntaxError("unexpected end of input", text=text, line=line, column=column,
                                 expected=_expected(parser, exc.expected or (), text))
    return FormatSyntaxError(f"unexpected {str(token)!r}", text=text, line=token.line, column=token.column,
                             expected=_expected(parser, getattr(exc, "expected", ()) or (), text))


@functools.lru_cache(maxsize=None)
def grammar_parser() -> Lark:
    """The LALR parser for ``grammar/format.lark`` (built once per process)."""
    return Lark.open_from_package("ustc.grammar", "format.lark", parser="lalr", propagate_positions=True,
                                  maybe_placeholders=True)


# -- building --------------------------------------------------------------------


class _Builder:
    """Syntax dataclasses → ``TensorFormat``; holds the text for located errors."""

    def __init__(self, text: str):
        self.text = text

    def located(self, exc: FormatSemanticError, span: Span) -> FormatSemanticError:
        return _located(exc, span, self.text)

    def fail(self, rule: str, span: Span) -> FormatSemanticError:
        return _located(FormatSemanticError(rule), span, self.text)

    def level_type(self, ls: LevelSyntax):
        cls = BY_KEYWORD.get(ls.keyword)
        if cls is None:
            close = difflib.get_close_matches(ls.keyword, list(BY_KEYWORD), n=1)
            hint = f"unknown level type {ls.keyword!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
            raise FormatSyntaxError(hint, text=self.text, line=ls.keyword_span.line,
                                    column=ls.keyword_span.column, expected=tuple(sorted(BY_KEYWORD)))
        return cls.from_syntax(ls.groups)

    def widths(self, widths: Sequence[WidthSyntax]) -> dict[str, int]:
        out: dict[str, int] = {}
        for w in widths:
            if w.key in out:
                raise self.fail(f"{w.key} is given twice", w.span)
            if w.value not in WIDTHS:
                raise self.fail(f"{w.key} must be one of {', '.join(map(str, WIDTHS))}, got {w.value}", w.span)
            out[w.key] = w.value
        return out

    def level_error(self, exc: FormatSemanticError, m: MapSyntax, k: int | None) -> FormatSemanticError:
        if k is None:
            return self.located(exc, m.span)
        span = m.levels[k].span
        error = FormatSemanticError(exc.rule, level=k, level_text=self.text[span.start:span.end])
        return self.located(error, span)

    def map(self, m: MapSyntax, widths: Sequence[WidthSyntax]) -> TensorFormat:
        levels = []
        for k, ls in enumerate(m.levels):
            try:
                levels.append((ls.expr, self.level_type(ls)))
            except FormatSemanticError as exc:
                raise self.level_error(exc, m, k) from None
        w = self.widths(widths)
        try:
            fmt = TensorFormat([d.name for d in m.dims], levels, pos_width=w.get("posWidth", 0),
                               crd_width=w.get("crdWidth", 0))
        except FormatSemanticError as exc:
            raise self.level_error(exc, m, exc.level) from None
        self.bindings(m, fmt)
        return fmt

    def bindings(self, m: MapSyntax, fmt: TensorFormat) -> None:
        """``{l0, ...}`` declarations, ``l = expr`` level bindings, ``d = expr`` dimension bindings."""
        if m.lvars is None:
            for ls in m.levels:
                if ls.var is not None:
                    raise self.fail(f"level variable '{ls.var}' is not declared in {{...}}", ls.span)
            lvars = [f"l{k}" for k in range(len(m.levels))]
        else:
            lvars = self.level_variables(m)
        for k, d in enumerate(m.dims):
            if d.binding is not None:
                self.dim_binding(d, k, lvars, fmt)

    def level_variables(self, m: MapSyntax) -> list[str]:
        for k, name in enumerate(m.lvars):
            if name in m.lvars[:k]:
                raise self.fail(f"level variable '{name}' is declared twice", m.span)
        if len(m.lvars) != len(m.levels):
            raise self.fail(f"{len(m.lvars)} level variables declared for {len(m.levels)} levels", m.span)
        lvars: list[str] = []
        for k, ls in enumerate(m.levels):
            name = ls.var or m.lvars[k]
            if name not in m.lvars or name in lvars:
                problem = "is not declared" if name not in m.lvars else "is bound twice"
                raise self.fail(f"level variable '{name}' {problem}", ls.span)
            if name != m.lvars[k]:  # as MLIR: the declaration order is the level order
                raise self.fail(f"level variable '{name}' is declared as level {m.lvars.index(name)} "
                                f"in {{...}} but bound by level {k}; bind '{m.lvars[k]}' here", ls.span)
            lvars.append(name)
        return lvars

    def dim_binding(self, d: DimSyntax, k: int, lvars: Sequence[str], fmt: TensorFormat) -> None:
        """Check ``d = expr`` against the derived inverse on a grid of coordinates."""
        import numpy as np

        for name in d.binding.variables():
            if name not in lvars:
                raise self.fail(f"'{name}' in the binding of '{d.name}' is not a level variable", d.span)
        rank = fmt.ndim
        points = np.indices((6,) * rank).reshape(rank, -1) if rank <= 4 else \
            np.random.default_rng(0).integers(0, 6, size=(rank, 4096))
        points = points.astype(object)  # exact Python integers: huge constants must not overflow int64
        try:
            env = dict(zip(lvars, fmt.level_coordinates(tuple(points))))
            ok = np.array_equal(np.broadcast_to(d.binding.evaluate(env), points[k].shape), points[k])
        except ZeroDivisionError:  # "l0 floordiv 0" in the binding
            ok = False
        if not ok:
            expected = fmt.dim_exprs[k].render(lambda n: lvars[int(n[1:])])
            raise self.fail(f"the binding '{d.name} = {d.binding}' does not invert the level map "
                            f"(expected {d.name} = {expected})", d.span)

    def named(self, n: NamedSyntax) -> TensorFormat:
        from .. import formats

        try:
            return formats.by_name(n.name, *n.args)
        except FormatSemanticError as exc:
            raise self.located(exc, n.span) from None
        except FormatError as exc:
            known = n.name.lower() in (name.lower() for name in formats.names())
            raise FormatSyntaxError(str(exc), text=self.text, line=n.span.line, column=n.span.column,
                                    expected=() if known else formats.names()) from None


def parse(text: str) -> TensorFormat:
    """Parse format text (DSL, MLIR wrapper or a named format) into a ``TensorFormat``."""
    if not isinstance(text, str):
        raise TypeError(f"format text must be a str, not {type(text).__name__}")
    return _parse(text, generation())


@functools.lru_cache(maxsize=MAX_CACHED)
def _parse(text: str, registry: int) -> TensorFormat:
    """``parse`` memoised per level-type registry generation ``registry``."""
    parser = grammar_parser()
    try:
        tree = parser.parse(text)
    except UnexpectedInput as exc:
        raise _syntax_error(exc, text, parser) from None
    try:
        syntax = _ToSyntax(text).transform(tree)
    except VisitError as exc:
        raise exc.orig_exc from None
    builder = _Builder(text)
    if isinstance(syntax, NamedSyntax):
        return builder.named(syntax)
    return builder.map(*syntax)
