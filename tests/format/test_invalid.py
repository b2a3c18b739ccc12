"""Invalid formats: every syntax error and every validity rule of design §2 gives a located FormatError."""

from __future__ import annotations

import pytest

import ustc
from ustc import Dimension, FormatError, FormatSemanticError, FormatSyntaxError, TensorFormat
from ustc import LevelFormat as LF
from ustc import LevelProperty as LP

SYN, SEM = FormatSyntaxError, FormatSemanticError

# (text, error class, line, column, level index (semantic errors; None = the map as a whole), message part)
INVALID = [
    # --- syntax -----------------------------------------------------------------------------------
    ("", SYN, 1, 1, None, "unexpected end of input"),
    ("   \n  ", SYN, 2, 3, None, "unexpected end of input"),
    ("(i, j) -> (i : dense, j : compressed", SYN, 1, 37, None, "unexpected end of input"),
    ("(i, j) -> (i : dense, j : compressed))", SYN, 1, 38, None, "unexpected ')'"),
    ("(i, j)\n  -> (i : dense,\n      j : $compressed)", SYN, 3, 11, None, "unexpected character '$'"),
    ("(i, j) -> (i : dense; j : compressed)", SYN, 1, 21, None, "unexpected character ';'"),
    ("(i,j)->(j:dense,i:dense),", SYN, 1, 26, None, "unexpected end of input"),
    ("() -> ()", SYN, 1, 2, None, "unexpected ')'"),
    ("(i, j) -> (i dense, j : compressed)", SYN, 1, 14, None, "unexpected 'dense'"),
    ("(i, j) (i : dense, j : compressed)", SYN, 1, 8, None, "unexpected '('"),
    ("#sparse_tensor.encoding<{ map = (i) -> (i : dense)", SYN, 1, 51, None, "unexpected end of input"),
    ("#sparse_tensor.encoding<{ (i) -> (i : dense) }>", SYN, 1, 27, None, "unexpected '('"),
    ("(i) -> (i : dense) }>", SYN, 1, 20, None, "unexpected '}'"),
    ("(i) -> (i : dense), fooWidth = 8", SYN, 1, 21, None, "unexpected 'fooWidth'"),
    ("(i, j) -> (i : dense, j : compressed), posWidth = 32 crdWidth = 8", SYN, 1, 54, None,
     "unexpected 'crdWidth'"),
    ("(i) -> (i : delta(-1))", SYN, 1, 19, None, "unexpected '-'"),
    ("(i, j) -> (i : dense, j : compressed) # fine\n garbage", SYN, 2, 2, None, "unexpected 'garbage'"),
    ("CSR CSC", SYN, 1, 5, None, "unexpected 'CSC'"),
    # unknown level type / named format, bad named-format arguments
    ("(i, j) -> (i : dense, j : compresed)", SYN, 1, 27, None, "unknown level type 'compresed' (did you mean "
                                                                "'compressed'?)"),
    ("(i, j) -> (i : sparse, j : compressed)", SYN, 1, 16, None, "unknown level type 'sparse'"),
    ("CRS", SYN, 1, 1, None, "unknown format name 'CRS'"),
    ("BSR(2)", SYN, 1, 1, None, "BSR takes (bm, bn)"),
    ("CSR(2)", SYN, 1, 1, None, "CSR takes no parameters"),
    ("COO(1)", SYN, 1, 1, None, "rank must be an integer in [2, 64], got 1"),
    ("CSF(99999999999999999999)", SYN, 1, 1, None, "rank must be an integer in [1, 64]"),
    ("DELTA(4, 8)", SYN, 1, 1, None, "must be 'packed'"),
    ("BSR(0, 2)", SEM, 1, 1, 0, "'floordiv' needs a positive constant, got 0"),
    ("DELTA(40)", SEM, 1, 1, 1, "delta(b) needs 1 <= b <= 32, got 40"),
    ("Structured(5, 4)", SEM, 1, 1, 2, "needs 0 <= n <= m, got [5, 4]"),
    # --- dimensions: used, declared, unique, enough levels -----------------------------------------
    ("(i, j) -> (i : dense, i floordiv 2 : compressed, i mod 2 : dense)", SEM, 1, 1, None,
     "dimension 'j' is not used by any level"),
    ("(i, j) -> (i : dense)", SEM, 1, 1, None, "2 dimensions need at least 2 levels, got 1"),
    ("(i, i) -> (i : dense, i : compressed)", SEM, 1, 1, None, "dimension 'i' is declared twice"),
    ("(i, j) -> (i : dense, k : compressed)", SEM, 1, 23, 1, "'k' is not a declared dimension"),
    ("(i, j) -> (j - i : compressed, i : range, k : dense)", SEM, 1, 43, 2, "'k' is not a declared dimension"),
    ("(i, j) -> (i : dense, i : compressed, j : dense)", SEM, 1, 23, 1, "'i' is already stored by level 0"),
    ("(i, j) -> (1 * i : dense, i : dense, j : compressed)", SEM, 1, 27, 1, "already stored by level 0"),
    ("(i, j) -> (i + j : compressed, j + i : compressed, j : range)", SEM, 1, 32, 1, "already stored by level 0"),
    ("(i, j) -> (i floordiv 2 : dense, j : compressed)", SEM, 1, 12, 0, "dimension 'i' is stored more than once or incompletely"),
    ("(i, j) -> (i floordiv 2 : dense, i : dense, j : compressed)", SEM, 1, 34, 1, "stored more than once"),
    ("(i, j) -> (2 * i : dense, i : dense, j : compressed)", SEM, 1, 27, 1, "stored more than once"),
    # --- expressions ------------------------------------------------------------------------------
    ("(i, j) -> (i * j : dense, j : compressed)", SEM, 1, 12, None, "'i * j' is not affine"),
    ("(i, j) -> (i floordiv j : dense, j : compressed)", SEM, 1, 12, None,
     "'floordiv' needs an integer constant on its right, got 'j'"),
    ("(i, j) -> (i % j : dense, j : compressed)", SEM, 1, 12, None, "'mod' needs an integer constant"),
    ("(i, j) -> (i floordiv 0 : dense, j : compressed, i mod 0 : dense)", SEM, 1, 12, 0,
     "'floordiv' needs a positive constant, got 0"),
    ("(i, j) -> (0 * i : dense, j : compressed)", SEM, 1, 12, 0, "'*' needs a positive constant, got 0"),
    ("(i, j) -> (-i : dense, j : compressed)", SEM, 1, 12, 0, "'*' needs a positive constant, got -1"),
    ("(i, j) -> (i - i : compressed, j : range)", SEM, 1, 12, 0, "'i - i' needs two different dimensions"),
    ("(i, j) -> ((i + j) floordiv 2 : dense, j : compressed)", SEM, 1, 12, 0, "unsupported level expression"),
    # --- singleton ----------------------------------------------------------------------------------
    ("(i, j) -> (i : dense, j : singleton)", SEM, 1, 23, 1,
     "a singleton level must follow a compressed, loose_compressed or singleton level"),
    ("(i, j) -> (i : singleton, j : compressed)", SEM, 1, 12, 0, "a singleton level must follow"),
    ("(i, j, k) -> (i : compressed, j : singleton, k : compressed)", SEM, 1, 31, 1,
     "only singleton levels"),
    # --- batch, properties ------------------------------------------------------------------------
    ("(i, j) -> (i : dense, j : batch)", SEM, 1, 23, 1, "batch levels must come before every other level"),
    ("(b, i, j) -> (b : batch, i : dense, j : batch)", SEM, 1, 37, 2, "batch levels must come before"),
    ("(i, j) -> (i : dense, j : compressed(soa))", SEM, 1, 23, 1, "'compressed' levels take no property 'soa'"),
    ("(i, j, k) -> (i : compressed(nonunique), j : singleton(soa, nonunique), k : singleton)", SEM, 1, 73, 2,
     "the singleton levels of one COO region must all be 'soa' or none: level 1 is 'soa', level 2 is not"),
    ("(i, j, k) -> (i : compressed(nonunique), j : singleton, k : singleton(soa))", SEM, 1, 57, 2,
     "level 1 is not 'soa', level 2 is"),
    ("(i, j) -> (i : loose_compressed(soa), j : dense)", SEM, 1, 12, 0,
     "'loose_compressed' levels take no property 'soa'"),
    ("(i, j) -> (i : dense(nonunique), j : compressed)", SEM, 1, 12, 0, "'dense' levels take no property"),
    ("(i, j) -> (i : batch(nonordered), j : compressed)", SEM, 1, 12, 0, "'batch' levels take no property"),
    ("(i, j) -> (j - i : compressed, i : range(nonunique))", SEM, 1, 32, 1, "'range' levels take no property"),
    ("(i, j) -> (i : dense, j : compressed(bogus))", SEM, 1, 23, 1, "unknown property 'bogus'"),
    ("(i, j) -> (i : dense, j : compressed(nonunique, nonunique))", SEM, 1, 23, 1, "a property is repeated"),
    ("(i, j) -> (i : dense, j : compressed[nonunique])", SEM, 1, 23, 1, "one parenthesised property list"),
    # --- structured -------------------------------------------------------------------------------
    ("(i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : structured[5, 4])", SEM, 1, 45, 2,
     "structured[n, m] needs 0 <= n <= m, got [5, 4]"),
    ("(i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : structured(5))", SEM, 1, 45, 2, "0 <= n <= m"),
    ("(i, j) -> (j floordiv 4 : dense, j mod 4 : structured[2, 4], i : dense)", SEM, 1, 34, 1,
     "a structured level must be the last level"),
    ("(i, j) -> (i : compressed, j floordiv 4 : dense, j mod 4 : structured[2, 4])", SEM, 1, 50, 2,
     "only dense levels may precede a structured level, not 'compressed'"),
    ("(i, j) -> (i : dense, j : structured[2, 4])", SEM, 1, 23, 1, "expression must be 'd mod m'"),
    ("(i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : structured[2, 8])", SEM, 1, 45, 2,
     "structured[2, 8] needs 'mod 8', the level has 'mod 4'"),
    ("(i, j) -> (i : dense, j mod 4 : structured[2, 4])", SEM, 1, 23, 1,
     "a structured level needs 'j floordiv 4' on an earlier level"),
    ("(i, j) -> (i : dense, j floordiv 2 : dense, j mod 2 : structured[2])", SEM, 1, 45, 2,
     "'structured' takes [n, m]"),
    ("(i, j) -> (i : dense, j floordiv 2 : dense, j mod 2 : structured)", SEM, 1, 45, 2,
     "'structured' takes [n, m] or (n)"),
    ("(i, j) -> (i : dense, j floordiv 4 : dense,\n  j mod 4 : structured[2, 4](nonunique))", SEM, 2, 3, 2,
     "no properties"),
    # --- block maps -------------------------------------------------------------------------------
    ("(i, j) -> (i : dense, j mod 2 : compressed, j floordiv 2 : dense)", SEM, 1, 23, 1,
     "'j floordiv 2' must come before 'j mod 2'"),
    ("(i, j) -> (i : dense, j floordiv 3 : compressed, j mod 2 : dense)", SEM, 1, 50, 2,
     "'j mod 2' and 'j floordiv 3' use different constants"),
    ("(i, j) -> (i mod 2 : dense, j : compressed)", SEM, 1, 12, 0, "needs 'i floordiv 2' on an earlier level"),
    # --- diagonal maps and range ------------------------------------------------------------------
    ("(i, j) -> (j - i : compressed, j : compressed)", SEM, 1, 12, 0,
     "'j - i' needs a later range level over one of j, i"),
    ("(i, j) -> (i + j : compressed, i : dense)", SEM, 1, 12, 0, "needs a later range level"),
    ("(i, j) -> (i : range, j : compressed)", SEM, 1, 12, 0, "a range level needs an earlier 'i - e' or 'i + e'"),
    ("(i, j) -> (j - i : compressed, i floordiv 2 : range)", SEM, 1, 32, 1,
     "a range level's expression must be a single dimension"),
    # --- widths -----------------------------------------------------------------------------------
    ("(i, j) -> (i : dense, j : compressed), posWidth = 7", SEM, 1, 40, None,
     "posWidth must be one of 0, 8, 16, 32, 64, got 7"),
    ("#sparse_tensor.encoding<{\n  map = (i, j) -> (i : dense, j : compressed),\n  crdWidth = 128\n}>", SEM, 3, 3,
     None, "crdWidth must be one of 0, 8, 16, 32, 64, got 128"),
    ("(i, j) -> (i : dense, j : compressed), posWidth = 32, posWidth = 32", SEM, 1, 55, None,
     "posWidth is given twice"),
    # --- delta ------------------------------------------------------------------------------------
    ("(i, j) -> (i : dense, j : delta(0))", SEM, 1, 23, 1, "delta(b) needs 1 <= b <= 32, got 0"),
    ("(i, j) -> (i : dense, j : delta(33))", SEM, 1, 23, 1, "delta(b) needs 1 <= b <= 32, got 33"),
    ("(i, j) -> (i : dense, j : delta(7, packed))", SEM, 1, 23, 1, "delta(7, packed) needs b in {1, 2, 3, 4, 5, 6, 8, 10, 16}"),
    ("(i, j) -> (i : dense, j : delta(4, nonunique))", SEM, 1, 23, 1, "'delta' takes (b) or (b, packed)"),
    ("(i, j) -> (i : dense, j : delta(4)(nonunique))", SEM, 1, 23, 1, "'delta' levels take no properties"),
    ("(i, j) -> (i : dense, j : delta)", SEM, 1, 23, 1, "'delta' takes its width in parentheses"),
    # --- level variables and dimension bindings ---------------------------------------------------
    ("{l0, l1} (i = l1, j = l1) -> (i : dense, j : compressed)", SEM, 1, 11, None,
     "the binding 'i = l1' does not invert the level map (expected i = l0)"),
    ("{a, b, c, d} (i = a * 2 + c, j = b * 2 + d) -> "
     "(a = i floordiv 2 : dense, b = j floordiv 3 : compressed, c = i mod 2 : dense, d = j mod 3 : dense)",
     SEM, 1, 30, None, "(expected j = 3 * b + d)"),
    ("{l0, l1} (i = l0 floordiv 0, j = l1) -> (i : dense, j : compressed)", SEM, 1, 11, None,
     "does not invert the level map"),
    ("{l0, l1} (i = l0 * 99999999999999999999999, j = l1) -> (i : dense, j : compressed)", SEM, 1, 11, None,
     "does not invert the level map"),
    ("{l0, l1} (i = l0, j = l2) -> (i : dense, j : compressed)", SEM, 1, 19, None,
     "'l2' in the binding of 'j' is not a level variable"),
    ("(i = l5, j) -> (i : dense, j : compressed)", SEM, 1, 2, None, "'l5' in the binding of 'i'"),
    ("(i, j) -> (l0 = i : dense, j : compressed)", SEM, 1, 12, None, "level variable 'l0' is not declared in {...}"),
    ("{l0, l1} (i, j) -> (l0 = i : dense, l2 = j : compressed)", SEM, 1, 37, None,
     "level variable 'l2' is not declared"),
    ("{l0, l0} (i, j) -> (i : dense, j : compressed)", SEM, 1, 1, None, "level variable 'l0' is declared twice"),
    ("{l0} (i, j) -> (i : dense, j : compressed)", SEM, 1, 1, None, "1 level variables declared for 2 levels"),
    ("{l0, l1} (i, j) -> (l1 = i : dense, j : compressed)", SEM, 1, 21, None,
     "level variable 'l1' is declared as level 1 in {...} but bound by level 0; bind 'l0' here"),
    ("{l1, l0} (i, j) -> (l0 = i : dense, l1 = j : compressed)", SEM, 1, 21, None,
     "level variable 'l0' is declared as level 1"),  # MLIR rejects it too
    ("{a, b, c} (i, j, k) -> (a = i : dense, c = k : compressed, b = j : compressed)", SEM, 1, 40, None,
     "level variable 'c' is declared as level 2 in {...} but bound by level 1"),
]


def test_table_size():
    assert len(INVALID) >= 30
    assert sum(cls is SYN for _, cls, *_ in INVALID) >= 10
    assert sum(cls is SEM for _, cls, *_ in INVALID) >= 30


@pytest.mark.parametrize("text, cls, line, column, level, message", INVALID,
                         ids=[f"{k}" for k in range(len(INVALID))])
def test_invalid_text(text, cls, line, column, level, message):
    with pytest.raises(cls) as info:
        TensorFormat.parse(text)
    exc = info.value
    assert type(exc) is cls
    assert isinstance(exc, FormatError) and isinstance(exc, ValueError) and isinstance(exc, ustc.UstcError)
    assert (exc.line, exc.column) == (line, column)
    assert message in str(exc)
    lines = text.splitlines() or [""]
    source = lines[line - 1] if line <= len(lines) else ""
    assert exc.source_line == source
    caret = "    " + " " * (column - 1) + "^"
    assert f"at line {line}, column {column}" in str(exc)
    assert caret in str(exc).splitlines()
    if cls is SEM:
        assert exc.level == level
        assert message in exc.rule
        if level is not None:
            assert exc.level_text
            if "->" in text:  # the level as written (a named format has no level text to quote)
                assert exc.level_text in text
            assert str(exc).startswith(f"level {level} (")
    else:
        assert not hasattr(exc, "level")


def test_syntax_errors_name_what_was_expected():
    with pytest.raises(FormatSyntaxError) as info:
        TensorFormat.parse("(i, j) -> (i : dense, j : compressed")
    assert info.value.expected == ("'('", "')'", "','", "'['")
    assert "expected one of: '(', ')', ',', '['" in str(info.value)
    with pytest.raises(FormatSyntaxError) as info:
        TensorFormat.parse("(i, j) -> (i : dense, j : sparse)")
    assert info.value.expected == tuple(sorted(t.keyword for t in ustc.format.LEVEL_TYPES))
    with pytest.raises(FormatSyntaxError) as info:
        TensorFormat.parse("CRS")
    assert info.value.expected == ustc.formats.names()


def test_error_message_layout():
    with pytest.raises(FormatSyntaxError) as info:
        TensorFormat.parse("(i, j)\n  -> (i : dense,\n      j : $compressed)")
    assert str(info.value).splitlines()[:3] == [
        "unexpected character '$' at line 3, column 11:",
        "          j : $compressed)",
        "              ^",
    ]
    with pytest.raises(FormatSemanticError) as info:
        TensorFormat.parse("(i, j) -> (i : dense, j : batch)")
    assert str(info.value).splitlines() == [
        "level 1 (j : batch): batch levels must come before every other level",
        "  at line 1, column 23:",
        "    (i, j) -> (i : dense, j : batch)",
        "                          ^",
    ]


def test_parse_rejects_non_text():
    for value in (None, 3, b"CSR"):
        with pytest.raises(TypeError):
            TensorFormat.parse(value)


def test_errors_are_not_cached_as_formats():
    for _ in range(2):
        with pytest.raises(FormatSyntaxError):
            TensorFormat.parse("(i) -> (i : nope)")


# --------------------------------------------------------------------------- object API

i, j = Dimension(dimension_name="i"), Dimension(dimension_name="j")

# (builder, error class, level index or None, message part)
INVALID_OBJECTS = [
    (lambda: TensorFormat([i, j], {i: (LF.DELTA, 40), j: LF.COMPRESSED}), SEM, 0,
     "delta(b) needs 1 <= b <= 32, got 40"),
    (lambda: TensorFormat([i, j], {i: LF.DENSE, j: (LF.DELTA, 7, "packed")}), SEM, 1, "needs b in {1, 2, 3, 4, 5, 6, 8, 10, 16}"),
    (lambda: TensorFormat([i, j], {i: LF.DENSE, j: (LF.DELTA, 4, LP.NONUNIQUE)}), SEM, 1,
     "'delta' levels take no property 'nonunique'"),
    (lambda: TensorFormat([i, j], {i: LF.DENSE, j: LF.DELTA}), SEM, 1, "(LevelFormat.DELTA, b[, 'packed'])"),
    (lambda: TensorFormat([i, j], {i: LF.DENSE, j // 4: LF.DENSE, j % 4: (LF.STRUCTURED, 5, 4)}), SEM, 2,
     "0 <= n <= m"),
    (lambda: TensorFormat([i, j], {i: LF.DENSE, j // 4: LF.DENSE, j % 4: (LF.STRUCTURED, 2, 4, LP.SOA)}), SEM, 2,
     "'structured' levels take no properties"),
    (lambda: TensorFormat([i, j], {i: LF.DENSE, j // 4: LF.DENSE, j % 4: LF.STRUCTURED}), SEM, 2,
     "'structured' takes n, m"),
    (lambda: TensorFormat([i, j], {i: LF.COMPRESSED, j // 4: LF.DENSE, j % 4: (LF.STRUCTURED, 2, 4)}), SEM, 2,
     "only dense levels may precede a structured level"),
    (lambda: TensorFormat([i, j], {i: LF.DENSE, j: (LF.COMPRESSED, LP.SOA)}), SEM, 1,
     "'compressed' levels take no property 'soa'"),
    (lambda: TensorFormat([i, j], {i: (LF.DENSE, LP.NONUNIQUE), j: LF.COMPRESSED}), SEM, 0,
     "'dense' levels take no property 'nonunique'"),
    (lambda: TensorFormat([i, j], {i: LF.DENSE, j: (LF.COMPRESSED, 3)}), SEM, 1,
     "'compressed' takes only level properties"),
    (lambda: TensorFormat([i, j], {i: LF.SINGLETON, j: LF.COMPRESSED}), SEM, 0, "a singleton level must follow"),
    (lambda: TensorFormat([i, j], {i: LF.DENSE, j: LF.BATCH}), SEM, 1, "batch levels must come before"),
    (lambda: TensorFormat([i, j], {j - i: LF.COMPRESSED, i: LF.DENSE}), SEM, 0, "needs a later range level"),
    (lambda: TensorFormat([i, j], {i % 2: LF.DENSE, j: LF.DENSE, i // 2: LF.DENSE}), SEM, 0,
     "'i floordiv 2' must come before 'i mod 2'"),
    (lambda: TensorFormat([i], {i: LF.DENSE, j: LF.COMPRESSED}), SEM, 1, "'j' is not a declared dimension"),
    (lambda: TensorFormat([i, i], {i: LF.DENSE}), SEM, None, "dimension 'i' is declared twice"),
    (lambda: TensorFormat([i, j], {i: LF.DENSE}), SEM, None, "2 dimensions need at least 2 levels, got 1"),
    (lambda: TensorFormat([i, j], {i: LF.DENSE, j: LF.COMPRESSED}, pos_width=7), SEM, None,
     "posWidth must be one of 0, 8, 16, 32, 64, got 7"),
    (lambda: TensorFormat([i, j], {i: LF.DENSE, j: LF.COMPRESSED}, crd_width="32"), SEM, None,
     "crdWidth must be one of"),
    (lambda: TensorFormat([i, j], {i: "dense", j: LF.COMPRESSED}), FormatError, None,
     "expected a LevelFormat or a tuple starting with one, got 'dense'"),
    (lambda: TensorFormat([i, j], {i: (), j: LF.COMPRESSED}), FormatError, None, "expected a LevelFormat"),
    (lambda: TensorFormat([i, j], {i: LP.NONUNIQUE, j: LF.COMPRESSED}), FormatError, None,
     "expected a LevelFormat"),
    (lambda: TensorFormat([1, 2], {i: LF.DENSE, j: LF.COMPRESSED}), FormatError, None,
     "a dimension must be a Dimension or a name, not 1"),
    (lambda: TensorFormat([i, j], [(i,), (j, LF.COMPRESSED)]), FormatError, None,
     "level 0: expected (expression, level format)"),
]


@pytest.mark.parametrize("build, cls, level, message", INVALID_OBJECTS,
                         ids=[f"{k}" for k in range(len(INVALID_OBJECTS))])
def test_invalid_objects(build, cls, level, message):
    with pytest.raises(cls) as info:
        build()
    exc = info.value
    assert type(exc) is cls
    assert isinstance(exc, ValueError)
    assert message in str(exc)
    if cls is SEM:
        assert exc.level == level
        assert exc.line is None and exc.column is None  # no text, no location
        if level is not None:
            assert str(exc).startswith(f"level {level} (")


def test_invalid_expressions_in_the_object_api():
    with pytest.raises(TypeError, match="'\\*' takes an integer constant"):
        i * j
    with pytest.raises(TypeError, match="'floordiv' takes an integer constant"):
        i // j
    with pytest.raises(TypeError, match="'mod' takes an integer constant"):
        i % 2.5
    with pytest.raises(FormatError, match="identifier"):
        Dimension(dimension_name="1a")
    with pytest.raises(TypeError):
        Dimension(dimension_name=3)
