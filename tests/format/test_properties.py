"""Property tests of the format DSL over random valid formats (tests/strategies.py) and random junk."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

import ustc
from strategies import (GENERATED_KEYWORDS, SPECIAL_NAMES, examples, format_texts, formats, formats_with_texts,
                        valid_texts)
from ustc import FormatError, LevelFormat, LevelProperty, TensorFormat
from ustc.format import LEVEL_TYPES, Mul, Sub

PARSE_SECONDS = 5.0  # "never hangs": generous, so a loaded CI machine does not flake


def test_strategy_knows_every_registered_level_type():
    assert {t.keyword for t in LEVEL_TYPES} == GENERATED_KEYWORDS


# --------------------------------------------------------------------------- round trips


@settings(max_examples=examples(300))
@given(formats())
def test_canonical_text_round_trip(fmt):
    text = str(fmt)
    again = TensorFormat.parse(text)
    assert again == fmt
    assert hash(again) == hash(fmt)
    assert str(again) == text
    assert again.digest == fmt.digest
    assert TensorFormat.parse(fmt.text) == fmt
    assert str(TensorFormat.parse(fmt.text)) == text
    # the canonical text is canonical: dimensions d0.., single spaces, no trailing zero widths
    assert text.startswith("(d0") and "  " not in text and "Width = 0" not in text


@settings(max_examples=examples(200))
@given(formats_with_texts())
def test_object_api_and_text_agree(case):
    fmt, text, canonical = case
    parsed = TensorFormat.parse(text)
    assert str(fmt) == canonical
    assert parsed == fmt and hash(parsed) == hash(fmt)
    assert str(parsed) == canonical
    assert parsed.level_formats == fmt.level_formats
    assert parsed.dim_exprs == fmt.dim_exprs


@settings(max_examples=examples(200))
@given(format_texts())
def test_random_spellings_have_the_expected_canonical_form(case):
    text, canonical = case
    assert str(TensorFormat.parse(text)) == canonical


# --------------------------------------------------------------------------- coordinates


def _origin(expr, sizes: dict[str, int]) -> int:
    """Smallest level coordinate: -(n_e - 1) for ``d - e``, 0 otherwise."""
    if isinstance(expr, Sub):
        return -(sizes[expr.right.name] - 1)
    return 0


@settings(max_examples=examples(200))
@given(formats(), st.data())
def test_dim_to_level_to_dim_is_identity(fmt, data):
    shape = data.draw(st.tuples(*[st.integers(1, 9)] * fmt.ndim), label="shape")
    extents = fmt.level_shape(shape)
    assert len(extents) == fmt.nlevels
    sizes = {d.name: n for d, n in zip(fmt.dims, shape)}
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    n = data.draw(st.integers(1, 16), label="points")
    coords = [rng.integers(0, size, size=n) for size in shape]
    coords[0][0] = 0
    for d in range(fmt.ndim):  # include the far corner
        coords[d][-1] = shape[d] - 1
    levels = fmt.level_coordinates(coords)
    for k, (lc, extent) in enumerate(zip(levels, extents)):
        lo = _origin(fmt.levels[k].expr, sizes)
        assert lc.min() >= lo and lc.max() < lo + extent, (k, str(fmt.levels[k]), shape)
    back = fmt.dim_coordinates(levels)
    for d in range(fmt.ndim):
        assert np.array_equal(back[d], coords[d])
    # the same on plain Python integers
    point = tuple(int(c[0]) for c in coords)
    level_point = fmt.level_coordinates(point)
    assert all(isinstance(x, int) for x in level_point)
    assert fmt.dim_coordinates(level_point) == point


@settings(max_examples=examples(150))
@given(formats(), st.data())
def test_level_to_dim_to_level_is_identity(fmt, data):
    """Every level coordinate tuple in range comes from one dimension point (no ``c * d`` scaling)."""
    if any(isinstance(lv.expr, Mul) and lv.expr.factor != 1 for lv in fmt.levels):
        return
    shape = data.draw(st.tuples(*[st.integers(1, 9)] * fmt.ndim), label="shape")
    sizes = {d.name: n for d, n in zip(fmt.dims, shape)}
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    levels = []
    for lv, extent in zip(fmt.levels, fmt.level_shape(shape)):
        lo = _origin(lv.expr, sizes)
        levels.append(rng.integers(lo, lo + extent, size=12))
    again = fmt.level_coordinates(fmt.dim_coordinates(levels))
    for k in range(fmt.nlevels):
        assert np.array_equal(again[k], levels[k]), (k, str(fmt))


def test_inverse_map_is_over_level_variables():
    for fmt in (ustc.formats.BSR(2, 3), ustc.formats.DIAI, ustc.formats.Structured(2, 4), ustc.formats.COO(3)):
        names = {f"l{k}" for k in range(fmt.nlevels)}
        for expr in fmt.dim_exprs:
            assert set(expr.variables()) <= names


# --------------------------------------------------------------------------- strategy parameters


def _kinds(fmt):
    return {type(lv.expr).__name__ for lv in fmt.levels}


@settings(max_examples=examples(60))
@given(formats(max_rank=2, level_types=[LevelFormat.DENSE, "compressed", LevelFormat.SINGLETON],
               allow_widths=False))
def test_strategy_restricts_level_types(fmt):
    assert fmt.ndim <= 2
    assert set(fmt.level_formats) <= {LevelFormat.DENSE, LevelFormat.COMPRESSED, LevelFormat.SINGLETON}
    assert fmt.pos_width == fmt.crd_width == 0


@settings(max_examples=examples(60))
@given(formats(allow_batch=False, allow_blocks=False, allow_diagonal=False, allow_structured=False))
def test_strategy_switches(fmt):
    assert all(isinstance(lv.expr, ustc.Dimension) for lv in fmt.levels)
    assert fmt.nlevels == fmt.ndim
    assert not {LevelFormat.BATCH, LevelFormat.RANGE, LevelFormat.STRUCTURED} & set(fmt.level_formats)


@settings(max_examples=examples(30))
@given(formats(level_types=[LevelFormat.BATCH]))
def test_strategy_batch_only(fmt):
    assert set(fmt.level_formats) == {LevelFormat.BATCH}


def test_strategy_rejects_impossible_requests():
    with pytest.raises(ValueError):
        formats(level_types=[LevelFormat.SINGLETON])
    with pytest.raises(ValueError):
        formats(level_types=["no_such_level"])
    with pytest.raises(ValueError):
        formats(max_rank=0)
    with pytest.raises(ValueError):
        formats(level_types=[LevelFormat.BATCH, LevelFormat.RANGE], allow_batch=False)


def _finds(condition, strategy=None, max_examples=2000):
    """Some generated format satisfies ``condition`` (generation only: no shrinking)."""
    return find(strategy if strategy is not None else formats(), condition,
                settings=settings(max_examples=max_examples, phases=[Phase.generate], database=None,
                                  suppress_health_check=list(HealthCheck)))


@pytest.mark.parametrize("keyword", sorted(GENERATED_KEYWORDS))
def test_strategy_generates_every_level_type(keyword):
    _finds(lambda f: LevelFormat(keyword) in f.level_formats)


@pytest.mark.parametrize("feature", [
    "nonunique", "nonordered", "soa", "packed", "posWidth", "crdWidth", "floordiv", "mod", " * ", " - ", " + ",
    "singleton(", "loose_compressed(", "structured[0,", "(d0, d1, d2, d3)",
])
def test_strategy_generates_every_feature(feature):
    _finds(lambda f: feature in str(f))


def test_strategy_generates_keyword_dimension_names():
    _finds(lambda f: any(d.name in SPECIAL_NAMES[:20] for d in f.dims))


def test_strategy_spells_texts_every_way():
    texts = format_texts()
    for feature in ("#sparse_tensor.encoding", "//", "/ ", "%", "#", "\n", "{", " = l", "structured(",
                    "Width = 0"):
        _finds(lambda case: feature in case[0], texts)


# --------------------------------------------------------------------------- robustness


def _parse_or_format_error(text: str):
    """Parse; only FormatError may escape, and quickly. An accepted text must round-trip."""
    start = time.perf_counter()
    try:
        fmt = TensorFormat.parse(text)
    except FormatError as exc:
        assert isinstance(exc, ValueError)
        if isinstance(exc, ustc.FormatSyntaxError):
            assert exc.line >= 1 and exc.column >= 1
        fmt = None
    assert time.perf_counter() - start < PARSE_SECONDS, text
    if fmt is not None:
        assert TensorFormat.parse(str(fmt)) == fmt
        assert TensorFormat.parse(fmt.text) == fmt
    return fmt


@settings(max_examples=examples(300))
@given(st.text(max_size=200))
def test_random_text_raises_only_format_errors(text):
    _parse_or_format_error(text)


DSL_PIECES = list("()[]{}<>,:=#-+*/%_ \n\t.0123456789ijkl") + [
    "->", "floordiv", "mod", "dense", "compressed", "singleton", "loose_compressed", "range", "batch", "delta",
    "structured", "packed", "nonunique", "nonordered", "soa", "posWidth", "crdWidth", "map", "l0", "d0",
    "#sparse_tensor.encoding", "<{", "}>", "(i, j)", "CSR", "BSR", "é", "\x00", "99999999999999999999",
]


WORDS = [t.keyword for t in LEVEL_TYPES] + [p.value for p in LevelProperty] + [
    "packed", "floordiv", "mod", "posWidth", "crdWidth", "i", "j", "d0", "l0", "0", "1", "2", "3", "4", "7", "8",
    "32", "33", "64", "99999999999999999999"]


@st.composite
def mutated_texts(draw):
    """A valid text with 1-4 random edits: characters, DSL pieces, or one word swapped for another
    (which mostly keeps the syntax and breaks a validity rule instead)."""
    text = draw(valid_texts())
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(("insert", "delete", "replace", "duplicate", "swap", "word", "word", "word")))
        a = draw(st.integers(0, len(text)))
        b = draw(st.integers(a, min(len(text), a + 12)))
        words = list(re.finditer(r"\w+", text))
        if op == "word" and words:
            w = draw(st.sampled_from(words))
            text = text[:w.start()] + draw(st.sampled_from(WORDS)) + text[w.end():]
        elif op == "insert":
            text = text[:a] + draw(st.sampled_from(DSL_PIECES)) + text[a:]
        elif op == "delete":
            text = text[:a] + text[b:]
        elif op == "replace":
            text = text[:a] + draw(st.sampled_from(DSL_PIECES)) + text[b:]
        elif op == "duplicate":
            text = text[:b] + text[a:b] + text[b:]
        else:  # reverse a slice
            text = text[:a] + text[a:b][::-1] + text[b:]
    return text


@settings(max_examples=examples(600))
@given(mutated_texts())
def test_mutated_texts_raise_only_format_errors(text):
    _parse_or_format_error(text)


@settings(max_examples=examples(100))
@given(st.lists(st.sampled_from(DSL_PIECES), max_size=40).map("".join))
def test_token_soup_raises_only_format_errors(text):
    _parse_or_format_error(text)


@pytest.mark.parametrize("text", [
    "(i) -> (" + "(" * 2000 + "i" + ")" * 2000 + " : dense)",
    "(i) -> (" + "- " * 2000 + "i : dense)",
    "(i) -> (" + " + ".join(["i"] * 2000) + " : dense)",
    "(i) -> (i" + " floordiv 2" * 2000 + " : dense)",
    "{l0} (i = " + " + ".join(["l0"] * 2000) + ") -> (i : dense)",
    "(" + ", ".join(f"d{k}" for k in range(300)) + ") -> (" + ", ".join(f"d{k} : dense" for k in range(300)) + ")",
    "CSF(2000)",
    "(i, j) -> (i : dense, j : delta(99999999999999999999999))",
    "BSR(99999999999999999999, 3)",
])
def test_pathological_inputs_are_handled_quickly(text):
    start = time.perf_counter()
    _parse_or_format_error(text)
    assert time.perf_counter() - start < 2 * PARSE_SECONDS

