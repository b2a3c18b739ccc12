"""Hypothesis strategies for ustc formats, shared by every test that needs random formats.

``formats(...)``
    random *valid* :class:`ustc.TensorFormat` objects, built at random through the
    object API or through DSL text, covering every level type of the registry, every
    property, every expression kind (plain, floordiv/mod block pairs, ``c * d``,
    ``d - e`` / ``d + e`` with a later ``range`` level), batch levels, structured
    n:m levels and index widths. Parameters restrict what is generated, so that later
    stages (conversion, codegen) can ask for the subset they support.

``format_texts(...)``
    ``(text, canonical)`` pairs: a DSL text in a random spelling (MLIR wrapper,
    ``//`` / ``/`` / ``%``, comments, whitespace and newlines, ``{l0, ...}`` level
    variables with ``l = expr`` bindings and ``(d = l0 * 2 + l2, ...)`` dimension
    bindings, zero widths written out) and its canonical text, computed here
    independently of ustc's printer.

``format_plans(...)``
    the underlying plan (:class:`FormatPlan`), for tests that want both spellings
    of one format (``plan.build_objects(draw)``, ``plan.render_text(draw)``).

Validity rules respected (design §2): batch levels first; a singleton follows a
compressed / loose_compressed / singleton level and only singletons follow it;
``structured[n, m]`` is last, only dense levels precede it, its expression is
``d mod m`` with ``d floordiv m`` earlier; ``d floordiv c`` comes before ``d mod c``;
``d - e`` / ``d + e`` has a later ``range`` level over one of the two dimensions and
the other dimension is not stored separately; ``delta(b)`` has 1 <= b <= 32,
``packed`` only for b in ``PACKABLE_BITS`` (1, 2, 3, 4, 5, 6, 8, 10, 16) and no properties; nonunique / nonordered only on
compressed, loose_compressed and singleton, soa only on singleton; widths in
{0, 8, 16, 32, 64}.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable

from hypothesis import strategies as st

from ustc import Dimension, LevelFormat, LevelProperty, TensorFormat
from ustc.format import LEVEL_TYPES
from ustc.format.levels.delta import PACKABLE_BITS

__all__ = ["examples", "GENERATED_KEYWORDS", "SPECIAL_NAMES", "WIDTHS", "FormatPlan", "LevelPlan", "dimension_names",
           "format_plans", "formats", "formats_with_texts", "format_texts", "valid_texts"]

WIDTHS = (0, 8, 16, 32, 64)


def examples(n: int) -> int:
    """``n`` Hypothesis examples, scaled by ``$USTC_TEST_SCALE`` (e.g. 20 for a long fuzzing run)."""
    return max(1, int(n * float(os.environ.get("USTC_TEST_SCALE", "1"))))

PACKABLE = PACKABLE_BITS

# Every level type of the registry must have a generator here; tests/format/test_properties.py
# checks that this set equals the registry, so a new level type makes that test fail until the
# strategy learns it.
GENERATED_KEYWORDS = frozenset({"dense", "batch", "range", "compressed", "loose_compressed", "singleton",
                                "delta", "structured"})
_FREE = ("dense", "compressed", "loose_compressed", "delta")  # may appear anywhere after batch levels
_SINGLETON_PARENTS = ("compressed", "loose_compressed")
_PROPS = {
    "compressed": (LevelProperty.NONUNIQUE, LevelProperty.NONORDERED),
    "loose_compressed": (LevelProperty.NONUNIQUE, LevelProperty.NONORDERED),
    "singleton": (LevelProperty.NONUNIQUE, LevelProperty.NONORDERED, LevelProperty.SOA),
}

# Names that are keywords somewhere in the DSL; the contextual lexer must accept them as dimensions.
SPECIAL_NAMES = ("dense", "compressed", "batch", "range", "singleton", "delta", "structured",
                 "loose_compressed", "floordiv", "mod", "map", "posWidth", "crdWidth", "packed", "nonunique",
                 "nonordered", "soa", "sparse_tensor", "encoding", "l0", "l1", "d0", "d1", "d2", "_", "CSR",
                 "COO", "BSR", "i", "j", "k")


def dimension_names(size: int) -> st.SearchStrategy[list[str]]:
    """``size`` distinct identifiers, DSL keywords and ``d<k>`` / ``l<k>`` look-alikes included."""
    name = st.one_of(st.sampled_from(SPECIAL_NAMES),
                     st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,7}", fullmatch=True))
    return st.lists(name, min_size=size, max_size=size, unique=True)


# --------------------------------------------------------------------------- plans


@dataclass(frozen=True)
class LevelPlan:
    """One level: expression ``kind`` over dimension indices ``dims`` and its level type.

    kind: ``dim`` (d), ``div`` (d floordiv c), ``mod`` (d mod c), ``mul`` (c * d),
    ``sub`` (dims[0] - dims[1]), ``add`` (dims[0] + dims[1]).
    params: delta ``(bits, packed)``; structured ``(n, m, bracket_spelling)``.
    props: properties in the (random) order they are written.
    """

    kind: str
    dims: tuple[int, ...]
    const: int | None
    keyword: str
    params: tuple = ()
    props: tuple[LevelProperty, ...] = ()


@dataclass(frozen=True)
class FormatPlan:
    names: tuple[str, ...]
    levels: tuple[LevelPlan, ...]
    pos_width: int = 0
    crd_width: int = 0

    # -- facts ---------------------------------------------------------------
    @property
    def rank(self) -> int:
        return len(self.names)

    @property
    def keywords(self) -> tuple[str, ...]:
        return tuple(lv.keyword for lv in self.levels)

    def canonical(self) -> str:
        """The canonical text (design §2), computed without ustc's printer."""
        def expr(lv: LevelPlan) -> str:
            d = [f"d{k}" for k in lv.dims]
            if lv.kind == "dim":
                return d[0]
            if lv.kind == "div":
                return f"{d[0]} floordiv {lv.const}"
            if lv.kind == "mod":
                return f"{d[0]} mod {lv.const}"
            if lv.kind == "mul":
                return d[0] if lv.const == 1 else f"{lv.const} * {d[0]}"
            if lv.kind == "sub":
                return f"{d[0]} - {d[1]}"
            a, b = sorted(lv.dims)
            return f"d{a} + d{b}"

        levels = ", ".join(f"{expr(lv)} : {_type_text(lv)}" for lv in self.levels)
        widths = "".join(f", {key} = {w}" for key, w in (("posWidth", self.pos_width),
                                                          ("crdWidth", self.crd_width)) if w)
        dims = ", ".join(f"d{k}" for k in range(self.rank))
        return f"({dims}) -> ({levels}){widths}"

    def inverse_tokens(self, d: int, lvars: list[str], draw) -> list[str]:
        """Tokens of a correct ``d = ...`` binding over level variables ``lvars``."""
        levels = self.levels
        for k, lv in enumerate(levels):
            if lv.kind == "dim" and lv.dims[0] == d:
                return [lvars[k]]
        for k, lv in enumerate(levels):
            if lv.kind == "mul" and lv.dims[0] == d:
                return [lvars[k], draw(st.sampled_from(("floordiv", "//", "/"))), str(lv.const)]
        for a, lv in enumerate(levels):
            if lv.kind == "div" and lv.dims[0] == d:
                b = next(k for k, o in enumerate(levels) if o.kind == "mod" and o.dims[0] == d)
                c, la, lb = str(lv.const), lvars[a], lvars[b]
                return draw(st.sampled_from(([c, "*", la, "+", lb], [la, "*", c, "+", lb],
                                             [lb, "+", c, "*", la], [lb, "+", la, "*", c])))
        for a, lv in enumerate(levels):
            if lv.kind in ("sub", "add") and d in lv.dims:
                other = lv.dims[1] if lv.dims[0] == d else lv.dims[0]
                b = next(k for k, o in enumerate(levels) if o.kind == "dim" and o.dims[0] == other)
                la, lb = lvars[a], lvars[b]
                if lv.kind == "add":                       # d + other = la
                    return [la, "-", lb]
                if lv.dims[0] == d:                        # d - other = la
                    return draw(st.sampled_from(([la, "+", lb], [lb, "+", la])))
                return [lb, "-", la]                       # other - d = la
        raise AssertionError(f"dimension {d} is not recoverable in {self}")

    # -- spellings -------------------------------------------------------------
    def build_objects(self, draw) -> TensorFormat:
        """The format through the nvmath-style object API, in a random spelling."""
        dims = [Dimension(dimension_name=n) for n in self.names]
        as_text = draw(st.booleans())
        spec = [(_expr_object(lv, dims, draw), _spec_object(lv, draw)) for lv in self.levels]
        levels = dict(spec) if draw(st.booleans()) else spec
        kwargs = {}
        if self.pos_width or draw(st.booleans()):
            kwargs["pos_width"] = self.pos_width
        if self.crd_width or draw(st.booleans()):
            kwargs["crd_width"] = self.crd_width
        return TensorFormat(list(self.names) if as_text else dims, levels, **kwargs)

    def render_text(self, draw, *, allow_bindings: bool = True) -> str:
        """DSL text of the format in a random spelling (see the module docstring)."""
        n = len(self.levels)
        lvars = None
        explicit = [False] * n
        if allow_bindings and draw(st.integers(0, 2)) == 0:
            taken = set(self.names)
            pool = draw(st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,4}", fullmatch=True)
                                 .filter(lambda s: s not in taken), min_size=n, max_size=n, unique=True))
            lvars = pool if draw(st.booleans()) else [f"l{k}" for k in range(n)]
            if set(lvars) & taken:  # "l0" may be a dimension name; then use fresh ones
                lvars = pool
            declared = list(lvars)  # declared in level order: MLIR and ustc reject any other
            explicit = draw(st.lists(st.booleans(), min_size=n, max_size=n))

        tokens: list[str] = []
        wrapper = draw(st.booleans())
        if wrapper:
            tokens += ["#sparse_tensor.encoding", "<", "{", "map", "="]
        if lvars is not None:
            tokens += ["{"] + _commas([[v] for v in declared]) + ["}"]
        dims = []
        for d, name in enumerate(self.names):
            if lvars is not None and draw(st.booleans()):
                dims.append([name, "="] + self.inverse_tokens(d, lvars, draw))
            else:
                dims.append([name])
        tokens += ["("] + _commas(dims) + [")", "->", "("]
        levels = []
        for k, lv in enumerate(self.levels):
            head = [lvars[k], "="] if lvars is not None and explicit[k] else []
            levels.append(head + _expr_tokens(lv, self.names, draw) + [":"] + _type_tokens(lv, draw))
        tokens += _commas(levels) + [")"]
        widths = []
        for key, w in (("posWidth", self.pos_width), ("crdWidth", self.crd_width)):
            if w or draw(st.integers(0, 3)) == 0:
                widths.append([",", key, "=", str(w)])
        for w in draw(st.permutations(widths)):
            tokens += w
        if wrapper:
            tokens += ["}", ">"]
        return _join(tokens, draw)


def _type_text(lv: LevelPlan) -> str:
    text = lv.keyword
    if lv.keyword == "delta":
        bits, packed = lv.params
        text += f"({bits}, packed)" if packed else f"({bits})"
    elif lv.keyword == "structured":
        n, m, _ = lv.params
        text += f"[{n}, {m}]"
    props = [p.value for p in LevelProperty if p in lv.props]
    return text + (f"({', '.join(props)})" if props else "")


def _type_tokens(lv: LevelPlan, draw) -> list[str]:
    tokens = [lv.keyword]
    if lv.keyword == "delta":
        bits, packed = lv.params
        tokens += ["(", str(bits), ",", "packed", ")"] if packed else ["(", str(bits), ")"]
    elif lv.keyword == "structured":
        n, m, bracket = lv.params
        tokens += ["[", str(n), ",", str(m), "]"] if bracket else ["(", str(n), ")"]
    if lv.props:
        tokens += ["("] + _commas([[p.value] for p in lv.props]) + [")"]
    return tokens


def _expr_tokens(lv: LevelPlan, names, draw) -> list[str]:
    d = [names[k] for k in lv.dims]
    if lv.kind == "dim":
        out = [d[0]] if draw(st.integers(0, 4)) else ["(", d[0], ")"]
    elif lv.kind == "div":
        out = [d[0], draw(st.sampled_from(("floordiv", "//", "/"))), str(lv.const)]
    elif lv.kind == "mod":
        out = [d[0], draw(st.sampled_from(("mod", "%"))), str(lv.const)]
    elif lv.kind == "mul":
        out = draw(st.sampled_from(([str(lv.const), "*", d[0]], [d[0], "*", str(lv.const)])))
    elif lv.kind == "sub":
        out = [d[0], "-", d[1]]
    else:
        out = draw(st.sampled_from(([d[0], "+", d[1]], [d[1], "+", d[0]])))
    if lv.kind != "dim" and draw(st.integers(0, 5)) == 0:
        out = ["("] + out + [")"]
    return out


def _expr_object(lv: LevelPlan, dims, draw):
    d = [dims[k] for k in lv.dims]
    c = lv.const
    if lv.kind == "dim":
        return d[0]
    if lv.kind == "div":
        return d[0] // c if draw(st.booleans()) else d[0] / c
    if lv.kind == "mod":
        return d[0] % c
    if lv.kind == "mul":
        return c * d[0] if draw(st.booleans()) else d[0] * c
    if lv.kind == "sub":
        return d[0] - d[1]
    return d[0] + d[1] if draw(st.booleans()) else d[1] + d[0]


def _spec_object(lv: LevelPlan, draw):
    fmt = LevelFormat(lv.keyword)
    if lv.keyword == "delta":
        bits, packed = lv.params
        return (fmt, bits, "packed") if packed else (fmt, bits)
    if lv.keyword == "structured":
        n, m, bracket = lv.params
        return (fmt, n, m) if bracket or draw(st.booleans()) else (fmt, n)
    if lv.props:
        return (fmt, *lv.props)
    return fmt if draw(st.integers(0, 3)) else (fmt,)


def _commas(items: list[list[str]]) -> list[str]:
    out: list[str] = []
    for k, item in enumerate(items):
        if k:
            out.append(",")
        out += item
    return out


_SEPARATORS = ("",) * 4 + (" ",) * 8 + ("  ", "\n", "\t", "\n    ", "  # a comment: (i, j) -> ...\n", "#\n")


def _wordy(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _join(tokens: list[str], draw) -> str:
    """Tokens joined by random whitespace and comments; words never run together. One draw (a
    seeded ``random.Random``): a draw per separator made generation twice as slow, and whitespace
    needs no shrinking (a failing seed still reproduces)."""
    rnd = draw(st.randoms(use_true_random=True))
    parts = [rnd.choice(("", "", " ", "\n", "# leading comment\n"))]
    for k, tok in enumerate(tokens):
        if k:
            sep = rnd.choice(_SEPARATORS)
            if not sep and _wordy(tokens[k - 1][-1]) and _wordy(tok[0]):
                sep = " "
            if not sep and tokens[k - 1] == "-" and tok.startswith(">"):
                sep = " "
            parts.append(sep)
        parts.append(tok)
    parts.append(rnd.choice(("", "", " ", "\n", "  # trailing comment")))
    return "".join(parts)


# --------------------------------------------------------------------------- generation


def _keywords(level_types: Iterable | None) -> frozenset[str]:
    registry = {t.keyword for t in LEVEL_TYPES}
    if level_types is None:
        return frozenset(registry)
    out = set()
    for t in level_types:
        kw = t.value if isinstance(t, LevelFormat) else getattr(t, "keyword", t)
        if kw not in registry:
            raise ValueError(f"unknown level type {t!r}; the registry has {sorted(registry)}")
        out.add(kw)
    return frozenset(out)


def _topological(draw, n: int, before: list[tuple[int, int]]) -> list[int]:
    """A random order of ``range(n)`` in which each ``(a, b)`` of ``before`` has a before b."""
    order: list[int] = []
    left = set(range(n))
    while left:
        ready = sorted(x for x in left if not any(b == x and a in left for a, b in before))
        x = draw(st.sampled_from(ready))
        order.append(x)
        left.remove(x)
    return order


def _block_or_plain(draw, d: int, allow_blocks: bool) -> list[tuple[str, tuple[int, ...], int | None]]:
    choice = draw(st.integers(0, 5)) if allow_blocks else 0
    if choice in (0, 1, 2):
        return [("dim", (d,), None)]
    if choice in (3, 4):
        c = draw(st.integers(1, 5))
        return [("div", (d,), c), ("mod", (d,), c)]
    return [("mul", (d,), draw(st.sampled_from((1, 2, 2, 3, 4))))]


@st.composite
def format_plans(draw, max_rank: int = 4, level_types=None, allow_batch: bool = True, allow_blocks: bool = True,
                 allow_diagonal: bool = True, allow_structured: bool = True, allow_widths: bool = True):
    """Random :class:`FormatPlan` objects; the parameters are those of :func:`formats`."""
    kws = _keywords(level_types)
    free = [k for k in _FREE if k in kws]
    rank = draw(st.integers(1, max_rank))
    names = tuple(draw(dimension_names(rank)))

    # n:m structured: only dense levels, "w floordiv m" somewhere, "w mod m : structured" last.
    if allow_structured and {"structured", "dense"} <= kws and draw(st.integers(0, 5)) == 0:
        w = draw(st.integers(0, rank - 1))
        m = draw(st.integers(1, 8))
        n = draw(st.integers(0, m))
        items = [("div", (w,), m)]
        for d in range(rank):
            if d != w:
                items += _block_or_plain(draw, d, allow_blocks)
        before = [(a, b) for a, x in enumerate(items) for b, y in enumerate(items)
                  if x[0] == "div" and y[0] == "mod" and x[1] == y[1]]
        order = _topological(draw, len(items), before)
        levels = [LevelPlan(*items[k], "dense") for k in order]
        levels.append(LevelPlan("mod", (w,), m, "structured", (n, m, draw(st.booleans()))))
        return _with_widths(draw, FormatPlan(names, tuple(levels)), allow_widths)

    dims = draw(st.permutations(range(rank)))
    # batch dimensions: a prefix of the levels
    nbatch = 0
    if allow_batch and "batch" in kws:
        if not free:
            nbatch = rank
        elif draw(st.integers(0, 2)) == 0:
            nbatch = draw(st.integers(1, rank))
    if not free and nbatch < rank:
        raise ValueError("level_types leaves nothing to store non-batch levels with")
    batch_items = [("dim", (d,), None) for d in dims[:nbatch]]
    rest = list(dims[nbatch:])

    items: list[tuple[str, tuple[int, ...], int | None]] = []
    ranges: list[int] = []  # item index of each range level
    diagonal_ok = allow_diagonal and "range" in kws and bool(free)
    while rest:
        d = rest.pop(0)
        if diagonal_ok and rest and draw(st.integers(0, 3)) == 0:
            e = rest.pop(draw(st.integers(0, len(rest) - 1)))
            kind = draw(st.sampled_from(("sub", "sub", "add")))
            pair = (d, e) if draw(st.booleans()) else (e, d)
            over = draw(st.sampled_from(pair))
            items.append((kind, pair, None))
            ranges.append(len(items))
            items.append(("dim", (over,), None))
        else:
            items += _block_or_plain(draw, d, allow_blocks)
    before = [(a, b) for a, x in enumerate(items) for b, y in enumerate(items)
              if x[0] == "div" and y[0] == "mod" and x[1] == y[1]]
    before += [(r - 1, r) for r in ranges]
    order = _topological(draw, len(items), before)

    kinds = ["batch"] * len(batch_items)
    body = [items[k] for k in order]
    for k in order:
        kinds.append("range" if k in ranges else draw(st.sampled_from(free)))
    all_items = batch_items + body

    # a singleton suffix after the last batch / range level, preceded by a compressed level
    parents = [k for k in _SINGLETON_PARENTS if k in kws]
    if "singleton" in kws and parents:
        last_fixed = max([k for k, kw in enumerate(kinds) if kw in ("batch", "range")], default=-1)
        first = max(last_fixed + 2, 1)
        if first <= len(kinds) - 1 and draw(st.integers(0, 2)) == 0:
            s = draw(st.integers(first, len(kinds) - 1))
            kinds[s - 1] = draw(st.sampled_from(parents))
            for k in range(s, len(kinds)):
                kinds[k] = "singleton"

    levels = []
    soa = draw(st.booleans())  # one layout for every singleton of the COO region (MLIR's rule)
    for (kind, ds, c), kw in zip(all_items, kinds):
        params: tuple = ()
        props: tuple = ()
        if kw == "delta":
            bits = draw(st.sampled_from(PACKABLE) | st.integers(1, 32))
            params = (bits, bits in PACKABLE and draw(st.booleans()))
        elif kw in _PROPS:
            choices = [p for p in _PROPS[kw] if p is not LevelProperty.SOA]
            props = tuple(draw(st.lists(st.sampled_from(choices), unique=True, max_size=len(choices))))
            if LevelProperty.SOA in _PROPS[kw] and soa:
                at = draw(st.integers(0, len(props)))
                props = props[:at] + (LevelProperty.SOA,) + props[at:]
        levels.append(LevelPlan(kind, ds, c, kw, params, props))
    return _with_widths(draw, FormatPlan(names, tuple(levels)), allow_widths)


def _with_widths(draw, plan: FormatPlan, allow_widths: bool) -> FormatPlan:
    if not allow_widths:
        return plan
    pos = draw(st.sampled_from(WIDTHS))
    crd = draw(st.sampled_from(WIDTHS))
    return FormatPlan(plan.names, plan.levels, pos, crd)


def _check_args(max_rank, level_types, allow_batch=True):
    if max_rank < 1:
        raise ValueError("max_rank must be >= 1")
    kws = _keywords(level_types)
    if not (set(_FREE) | ({"batch"} if allow_batch else set())) & kws:
        raise ValueError(f"level types {sorted(kws)} cannot form a format on their own "
                         "(need one of dense, batch, compressed, loose_compressed, delta)")


def formats(max_rank: int = 4, level_types=None, allow_batch: bool = True, allow_blocks: bool = True,
            allow_diagonal: bool = True, allow_structured: bool = True, allow_widths: bool = True
            ) -> st.SearchStrategy[TensorFormat]:
    """Random valid formats; built through the object API or parsed from random text.

    ``level_types``: LevelFormat members / keywords / level-type classes to draw from
    (None: the whole registry). ``allow_blocks`` covers ``d floordiv c`` / ``d mod c`` pairs
    and ``c * d``; ``allow_diagonal`` covers ``d - e`` / ``d + e`` with a ``range`` level.
    """
    _check_args(max_rank, level_types, allow_batch)
    plans = format_plans(max_rank, level_types, allow_batch, allow_blocks, allow_diagonal, allow_structured,
                         allow_widths)

    @st.composite
    def build(draw):
        plan = draw(plans)
        if draw(st.booleans()):
            return plan.build_objects(draw)
        return TensorFormat.parse(plan.render_text(draw))

    return build()


def formats_with_texts(max_rank: int = 4, **kwargs) -> st.SearchStrategy[tuple[TensorFormat, str, str]]:
    """``(format built from objects, random DSL text of it, expected canonical text)``."""
    plans = format_plans(max_rank, **kwargs)

    @st.composite
    def build(draw):
        plan = draw(plans)
        return plan.build_objects(draw), plan.render_text(draw), plan.canonical()

    return build()


def format_texts(max_rank: int = 4, **kwargs) -> st.SearchStrategy[tuple[str, str]]:
    """``(valid DSL text in a random spelling, its expected canonical text)``."""
    plans = format_plans(max_rank, **kwargs)

    @st.composite
    def build(draw):
        plan = draw(plans)
        return plan.render_text(draw), plan.canonical()

    return build()


def valid_texts(max_rank: int = 4) -> st.SearchStrategy[str]:
    """Valid format texts: random DSL spellings and named formats (``CSR``, ``bsr(2, 3)``)."""
    from ustc import formats as named

    examples = []
    for nf in named.NAMED:
        examples.append(nf.name)
        if nf.example:
            examples.append(f"{nf.name.lower()}({', '.join(map(str, nf.example))})")
    return st.one_of(format_texts(max_rank).map(lambda pair: pair[0]), st.sampled_from(examples))
