"""The nvmath-style object API: Dimension, LevelFormat, LevelProperty, TensorFormat(dims, {expr: level})."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import numpy as np
import pytest

import ustc
from ustc import Dimension, LevelFormat, LevelProperty, TensorFormat, formats
from ustc.format import LEVEL_TYPES, Add, FloorDiv, Mod, Mul, Sub

D, C, S = LevelFormat.DENSE, LevelFormat.COMPRESSED, LevelFormat.SINGLETON
i, j, k = (Dimension(dimension_name=n) for n in "ijk")


# --------------------------------------------------------------------------- enums


def test_level_format_is_derived_from_the_registry():
    assert [m.value for m in LevelFormat] == [t.keyword for t in LEVEL_TYPES]
    assert [m.name for m in LevelFormat] == [t.keyword.upper() for t in LEVEL_TYPES]
    for member in LevelFormat:
        assert repr(member) == f"<LevelFormat.{member.name}>"
        assert str(member) == member.value
        assert LevelFormat(member.value) is member
        assert pickle.loads(pickle.dumps(member)) is member


def test_level_properties_in_canonical_order():
    assert [p.value for p in LevelProperty] == ["nonunique", "nonordered", "soa"]
    assert repr(LevelProperty.NONUNIQUE) == "<LevelProperty.NONUNIQUE>"
    assert str(LevelProperty.SOA) == "soa"
    assert pickle.loads(pickle.dumps(LevelProperty.SOA)) is LevelProperty.SOA


# --------------------------------------------------------------------------- expressions


def test_dimensions():
    assert i.name == i.dimension_name == "i"
    assert repr(i) == str(i) == "i"
    assert Dimension("i") == i and hash(Dimension("i")) == hash(i)
    assert Dimension("i") != j


def test_expression_operators():
    assert (i // 2) == (i / 2) == FloorDiv(i, 2)
    assert (i % 2) == Mod(i, 2)
    assert (j - i) == Sub(j, i)
    assert (i + j) == Add(i, j)
    assert (3 * j) == (j * 3) == Mul(3, j)
    assert [str(e) for e in (i // 2, i / 3, i % 2, j - i, i + j, 3 * j, j * 4)] == [
        "i floordiv 2", "i floordiv 3", "i mod 2", "j - i", "i + j", "3 * j", "4 * j"]
    assert [repr(e) for e in (i // 2, i % 2, j - i, 2 * i)] == ["i floordiv 2", "i mod 2", "j - i", "2 * i"]
    assert (j - i).variables() == ("j", "i")
    assert str((i + j) - k) == "i + j - k" and str(i - (j - k)) == "i - (j - k)"
    assert str((i + 1) // 2) == "(i + 1) floordiv 2"


def test_expression_evaluation_on_ints_and_arrays():
    env = {"i": 7, "j": 3}
    assert [e.evaluate(env) for e in (i // 2, i % 2, j - i, i + j, 3 * j)] == [3, 1, -4, 10, 9]
    rows = np.array([0, 1, 5, 6])
    assert (i // 2).evaluate({"i": rows}).tolist() == [0, 0, 2, 3]
    assert (i % 2).evaluate({"i": rows}).tolist() == [0, 1, 1, 0]


def test_expressions_are_frozen_and_hashable():
    with pytest.raises(dataclasses.FrozenInstanceError):
        i.dimension_name = "k"
    e = i // 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.constant = 3
    assert len({i // 2, i / 2, FloorDiv(Dimension("i"), 2)}) == 1


# --------------------------------------------------------------------------- formats from objects


def test_objects_and_text_build_equal_formats():
    csc = TensorFormat([i, j], {j: D, i: C})
    text = TensorFormat.parse("(r, c) -> (c : dense, r : compressed)")
    assert csc == text and hash(csc) == hash(text)
    assert csc == formats.CSC
    assert str(csc) == "(d0, d1) -> (d1 : dense, d0 : compressed)"
    assert csc.text == "(i, j) -> (j : dense, i : compressed)"
    assert TensorFormat.parse(csc.text) == csc
    # dimension names as strings, levels as a list of pairs, tuple specs with no arguments
    assert TensorFormat(["i", "j"], [(i, (D,)), ("j", (C,))]) == formats.CSR
    # the same format through every spelling of the object API
    coo = TensorFormat([i, j], {i: (C, LevelProperty.NONUNIQUE), j: S})
    assert coo == formats.COO() == TensorFormat.parse("(a, b) -> (a : compressed(nonunique), b : singleton)")


OBJECT_FORMATS = [
    # (builder, DSL text, exact repr)
    (lambda: TensorFormat([i, j], {i: D, j: C}),
     "(i, j) -> (i : dense, j : compressed)",
     "[i, j] -> (i: <LevelFormat.DENSE>, j: <LevelFormat.COMPRESSED>)"),
    (lambda: TensorFormat([i, j], {j: D, i: C}),
     "(i, j) -> (j : dense, i : compressed)",
     "[i, j] -> (j: <LevelFormat.DENSE>, i: <LevelFormat.COMPRESSED>)"),
    (lambda: TensorFormat([i, j], {i: (C, LevelProperty.NONUNIQUE), j: S}),
     "(i, j) -> (i : compressed(nonunique), j : singleton)",
     "[i, j] -> (i: (<LevelFormat.COMPRESSED>, <LevelProperty.NONUNIQUE>), j: <LevelFormat.SINGLETON>)"),
    (lambda: TensorFormat([i, j], {i: (C, LevelProperty.NONORDERED, LevelProperty.NONUNIQUE),
                                   j: (S, LevelProperty.SOA, LevelProperty.NONORDERED)}),
     "(i, j) -> (i : compressed(nonunique, nonordered), j : singleton(nonordered, soa))",
     "[i, j] -> (i: (<LevelFormat.COMPRESSED>, <LevelProperty.NONUNIQUE>, <LevelProperty.NONORDERED>), "
     "j: (<LevelFormat.SINGLETON>, <LevelProperty.NONORDERED>, <LevelProperty.SOA>))"),
    (lambda: TensorFormat([i, j], {i: D, j: (LevelFormat.DELTA, 2)}),
     "(i, j) -> (i : dense, j : delta(2))",
     "[i, j] -> (i: <LevelFormat.DENSE>, j: (<LevelFormat.DELTA>, 2))"),
    (lambda: TensorFormat([i, j], {i: D, j: (LevelFormat.DELTA, 4, "packed")}),
     "(i, j) -> (i : dense, j : delta(4, packed))",
     "[i, j] -> (i: <LevelFormat.DENSE>, j: (<LevelFormat.DELTA>, 4, 'packed'))"),
    (lambda: TensorFormat([i, j], {i: D, j // 4: D, j % 4: (LevelFormat.STRUCTURED, 2, 4)}),
     "(i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : structured[2, 4])",
     "[i, j] -> (i: <LevelFormat.DENSE>, j floordiv 4: <LevelFormat.DENSE>, "
     "j mod 4: (<LevelFormat.STRUCTURED>, 2, 4))"),
    (lambda: TensorFormat([i, j], {i: D, j // 4: D, j % 4: (LevelFormat.STRUCTURED, 2)}),
     "(i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : structured(2))",
     "[i, j] -> (i: <LevelFormat.DENSE>, j floordiv 4: <LevelFormat.DENSE>, "
     "j mod 4: (<LevelFormat.STRUCTURED>, 2, 4))"),
    (lambda: TensorFormat([i, j], {i // 2: D, j / 3: C, i % 2: D, j % 3: D}, pos_width=32, crd_width=8),
     "(i, j) -> (i // 2 : dense, j / 3 : compressed, i % 2 : dense, j % 3 : dense), posWidth = 32, crdWidth = 8",
     "[i, j] -> (i floordiv 2: <LevelFormat.DENSE>, j floordiv 3: <LevelFormat.COMPRESSED>, "
     "i mod 2: <LevelFormat.DENSE>, j mod 3: <LevelFormat.DENSE>), posWidth=32, crdWidth=8"),
    (lambda: TensorFormat([i, j], {j - i: C, i: LevelFormat.RANGE}),
     "(i, j) -> (j - i : compressed, i : range)",
     "[i, j] -> (j - i: <LevelFormat.COMPRESSED>, i: <LevelFormat.RANGE>)"),
    (lambda: TensorFormat([i, j], {j + i: C, j: LevelFormat.RANGE}),
     "(i, j) -> (j + i : compressed, j : range)",
     "[i, j] -> (j + i: <LevelFormat.COMPRESSED>, j: <LevelFormat.RANGE>)"),
    (lambda: TensorFormat([i, j], {2 * i: D, j: (LevelFormat.LOOSE_COMPRESSED, LevelProperty.NONORDERED)}),
     "(i, j) -> (i * 2 : dense, j : loose_compressed(nonordered))",
     "[i, j] -> (2 * i: <LevelFormat.DENSE>, j: (<LevelFormat.LOOSE_COMPRESSED>, <LevelProperty.NONORDERED>))"),
    (lambda: TensorFormat([k, i, j], {k: LevelFormat.BATCH, i: D, j: C}),
     "(k, i, j) -> (k : batch, i : dense, j : compressed)",
     "[k, i, j] -> (k: <LevelFormat.BATCH>, i: <LevelFormat.DENSE>, j: <LevelFormat.COMPRESSED>)"),
]


@pytest.mark.parametrize("build, text, expected_repr", OBJECT_FORMATS, ids=[str(n) for n in range(len(OBJECT_FORMATS))])
def test_object_formats(build, text, expected_repr):
    fmt = build()
    parsed = TensorFormat.parse(text)
    assert fmt == parsed and hash(fmt) == hash(parsed) and str(fmt) == str(parsed)
    assert repr(fmt) == expected_repr
    assert repr(parsed) == expected_repr  # the text used the same dimension names
    assert TensorFormat.parse(str(fmt)) == fmt and TensorFormat.parse(fmt.text) == fmt


def test_repr_of_named_formats():
    assert repr(formats.CSR) == "[i, j] -> (i: <LevelFormat.DENSE>, j: <LevelFormat.COMPRESSED>)"
    assert repr(formats.DIAI) == "[i, j] -> (j - i: <LevelFormat.COMPRESSED>, i: <LevelFormat.RANGE>)"
    assert repr(formats.BSR(2, 3)) == (
        "[i, j] -> (i floordiv 2: <LevelFormat.DENSE>, j floordiv 3: <LevelFormat.COMPRESSED>, "
        "i mod 2: <LevelFormat.DENSE>, j mod 3: <LevelFormat.DENSE>)")
    assert repr(formats.Dense(3)) == ("[i, j, k] -> (i: <LevelFormat.DENSE>, j: <LevelFormat.DENSE>, "
                                      "k: <LevelFormat.DENSE>)")


def test_level_objects():
    fmt = TensorFormat([i, j], {i: (C, LevelProperty.NONUNIQUE), j: S})
    assert fmt.dims == (i, j)
    assert [lv.expr for lv in fmt.levels] == [i, j]
    assert fmt.level_formats == (C, S)
    assert [lv.type.format for lv in fmt.levels] == [C, S]
    assert fmt.levels[0].type.properties == (LevelProperty.NONUNIQUE,)
    assert str(fmt.levels[0]) == "i : compressed(nonunique)"


# --------------------------------------------------------------------------- frozen, hashable, picklable


def test_formats_are_frozen():
    fmt = TensorFormat([i, j], {i: D, j: C})
    for attr, value in (("dims", ()), ("levels", ()), ("pos_width", 32), ("crd_width", 8), ("name", "x"),
                        ("dim_exprs", ()), ("signature", "x")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(fmt, attr, value)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fmt.levels[0].expr = j
    with pytest.raises(dataclasses.FrozenInstanceError):
        fmt.levels[0].type.properties = (LevelProperty.NONUNIQUE,)
    with pytest.raises(TypeError):
        fmt.levels[0] = fmt.levels[1]
    assert str(fmt) == "(d0, d1) -> (d0 : dense, d1 : compressed)"


def test_formats_are_hashable_dict_keys():
    table = {formats.CSR: "csr", formats.CSC: "csc", formats.BSR(2, 2): "bsr"}
    assert table[TensorFormat([i, j], {i: D, j: C})] == "csr"
    assert table[TensorFormat.parse("#sparse_tensor.encoding<{ map = (a, b) -> (b : dense, a : compressed) }>")] \
        == "csc"
    assert table[TensorFormat.parse("(x, y) -> (x // 2 : dense, y / 2 : compressed, x % 2 : dense, y mod 2 : dense)")] \
        == "bsr"
    spellings = {TensorFormat.parse(t) for t in ("CSR", "csr", "(i,j)->(i:dense,j:compressed)",
                                                 "{l0, l1} (a = l0, b = l1) -> (l0 = a : dense, l1 = b : compressed)")}
    spellings.add(TensorFormat([i, j], [(i, D), (j, C)]))
    assert len(spellings) == 1


@pytest.mark.parametrize("nf", formats.NAMED, ids=lambda nf: nf.name)
def test_pickle_and_copy_round_trip(nf):
    fmt = nf.format()
    for clone in (pickle.loads(pickle.dumps(fmt)), copy.deepcopy(fmt), copy.copy(fmt)):
        assert clone == fmt and hash(clone) == hash(fmt)
        assert repr(clone) == repr(fmt) and str(clone) == str(fmt) and clone.name == fmt.name
        assert clone.dim_exprs == fmt.dim_exprs


def test_parse_is_cached():
    text = "(i, j) -> (i floordiv 2 : dense, j : compressed, i mod 2 : dense), crdWidth = 16"
    first = TensorFormat.parse(text)
    assert TensorFormat.parse(text) is first
    assert ustc.parse(text) is first
    other = TensorFormat.parse(text + " ")
    assert other == first  # equal, from another cache entry
    assert TensorFormat.parse("CSR") is TensorFormat.parse("CSR")


def test_level_types_repr_and_text_cover_registry():
    # every registered level type has a DSL keyword, an nvmath-style repr and a buffer list
    for level_type in LEVEL_TYPES:
        assert level_type.keyword and level_type.keyword.isidentifier()
        assert set(level_type.buffers) <= {"pos", "crd"}
