"""Valid formats: DSL text (and named formats) -> exact canonical text, plus the design's worked examples."""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest

import ustc
from ustc import TensorFormat, formats
from ustc.format import LEVEL_TYPES

CSR = "(d0, d1) -> (d0 : dense, d1 : compressed)"
CSC = "(d0, d1) -> (d1 : dense, d0 : compressed)"
COO = "(d0, d1) -> (d0 : compressed(nonunique), d1 : singleton)"
BSR23 = "(d0, d1) -> (d0 floordiv 2 : dense, d1 floordiv 3 : compressed, d0 mod 2 : dense, d1 mod 3 : dense)"
BSR22 = "(d0, d1) -> (d0 floordiv 2 : dense, d1 floordiv 2 : compressed, d0 mod 2 : dense, d1 mod 2 : dense)"
S24 = "(d0, d1) -> (d0 : dense, d1 floordiv 4 : dense, d1 mod 4 : structured[2, 4])"
DIAI = "(d0, d1) -> (d1 - d0 : compressed, d0 : range)"

MULTILINE = """
# CSR, written over several lines
(i, j)              # two dimensions
  -> (i : dense,    # rows
      j : compressed)  # columns
"""

MLIR_MULTILINE = """#sparse_tensor.encoding<{
    map = (i, j) ->
          (i floordiv 2 : dense,     # block row
           j floordiv 3 : compressed,
           i mod 2 : dense,
           j mod 3 : dense),
    posWidth = 32,
    crdWidth = 16
}>"""

# (input, exact canonical text). Every named format of ustc.formats.NAMED appears at least once
# (checked below), every level type, property, expression kind and spelling of the DSL too.
VALID = [
    # --- named formats ------------------------------------------------------------------------
    ("CSR", CSR),
    ("csr", CSR),
    ("CSC", CSC),
    ("DCSR", "(d0, d1) -> (d0 : compressed, d1 : compressed)"),
    ("DCSC", "(d0, d1) -> (d1 : compressed, d0 : compressed)"),
    ("CROW", "(d0, d1) -> (d0 : compressed, d1 : dense)"),
    ("CCOL", "(d0, d1) -> (d1 : compressed, d0 : dense)"),
    ("COO", COO),
    ("COO(3)", "(d0, d1, d2) -> (d0 : compressed(nonunique), d1 : singleton(nonunique), d2 : singleton)"),
    ("Dense", "(d0, d1) -> (d0 : dense, d1 : dense)"),
    ("Dense(3)", "(d0, d1, d2) -> (d0 : dense, d1 : dense, d2 : dense)"),
    ("Dense(1)", "(d0) -> (d0 : dense)"),
    ("DIAI", DIAI),
    ("DIAJ", "(d0, d1) -> (d1 - d0 : compressed, d1 : range)"),
    ("SkewDIAI", "(d0, d1) -> (d0 + d1 : compressed, d0 : range)"),
    ("SkewDIAJ", "(d0, d1) -> (d0 + d1 : compressed, d1 : range)"),
    ("bsr(2, 3)", BSR23),
    ("BSR(2,2)", BSR22),
    ("BSC(2, 3)", "(d0, d1) -> (d1 floordiv 3 : dense, d0 floordiv 2 : compressed, d0 mod 2 : dense, "
                  "d1 mod 3 : dense)"),
    ("DELTA(4, packed)", "(d0, d1) -> (d0 : dense, d1 : delta(4, packed))"),
    ("delta(8)", "(d0, d1) -> (d0 : dense, d1 : delta(8))"),
    ("Structured(2, 4)", S24),
    ("structured(1, 2)", "(d0, d1) -> (d0 : dense, d1 floordiv 2 : dense, d1 mod 2 : structured[1, 2])"),
    ("CSF(4)", "(d0, d1, d2, d3) -> (d0 : compressed, d1 : compressed, d2 : compressed, d3 : compressed)"),
    ("CSF", "(d0, d1, d2) -> (d0 : compressed, d1 : compressed, d2 : compressed)"),
    ("BatchedCSR", "(d0, d1, d2) -> (d0 : batch, d1 : dense, d2 : compressed)"),
    ("  CSR  # a named format with a comment\n", CSR),
    # --- plain maps, spacing --------------------------------------------------------------------
    ("(i, j) -> (i : dense, j : compressed)", CSR),
    ("(i,j)->(i:dense,j:compressed)", CSR),
    ("(row, col) -> (col : dense, row : compressed)", CSC),
    ("(i) -> (i : compressed)", "(d0) -> (d0 : compressed)"),
    ("(x) -> (x : batch)", "(d0) -> (d0 : batch)"),
    (MULTILINE, CSR),
    ("\t(i,\n j)\n->\n(i\n:\ndense\n,\nj\n:\ncompressed\n)\n", CSR),
    # --- MLIR wrapper and widths ------------------------------------------------------------------
    ("#sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed) }>", CSR),
    ("#sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed), posWidth = 32 }>",
     CSR + ", posWidth = 32"),
    ("#sparse_tensor.encoding<{map=(i,j)->(i:dense,j:compressed),crdWidth=8,posWidth=64}>",
     CSR + ", posWidth = 64, crdWidth = 8"),
    ("(i, j) -> (i : dense, j : compressed), crdWidth = 16", CSR + ", crdWidth = 16"),
    ("(i, j) -> (i : dense, j : compressed), posWidth = 0, crdWidth = 0", CSR),
    ("(i, j) -> (i : dense, j : compressed), posWidth = 0, crdWidth = 32", CSR + ", crdWidth = 32"),
    (MLIR_MULTILINE, BSR23 + ", posWidth = 32, crdWidth = 16"),
    # --- expressions ------------------------------------------------------------------------------
    ("(i, j) -> (i floordiv 2 : dense, j floordiv 3 : compressed, i mod 2 : dense, j mod 3 : dense)", BSR23),
    ("(i, j) -> (i // 2 : dense, j / 3 : compressed, i % 2 : dense, j mod 3 : dense)", BSR23),
    ("(i, j) -> ((i) // 2 : dense, (j / 3) : compressed, (i % 2) : dense, ((j)) % 3 : dense)", BSR23),
    ("(i, j) -> (i floordiv 2 : dense, j : compressed, i mod 2 : dense)",
     "(d0, d1) -> (d0 floordiv 2 : dense, d1 : compressed, d0 mod 2 : dense)"),
    ("(i, j) -> (2 * i : dense, j : compressed)", "(d0, d1) -> (2 * d0 : dense, d1 : compressed)"),
    ("(i, j) -> (i * 3 : dense, j : compressed)", "(d0, d1) -> (3 * d0 : dense, d1 : compressed)"),
    ("(i, j) -> (1 * i : dense, j : compressed)", CSR),
    ("(i, j) -> (j - i : compressed, i : range)", DIAI),
    ("(i, j) -> (i - j : compressed, j : range)", "(d0, d1) -> (d0 - d1 : compressed, d1 : range)"),
    ("(i, j) -> (j + i : compressed, j : range)", "(d0, d1) -> (d0 + d1 : compressed, d1 : range)"),
    ("(i, j) -> (j - i : dense, i : range)", "(d0, d1) -> (d1 - d0 : dense, d0 : range)"),
    ("(b, i, j) -> (b : batch, j - i : compressed, i : range)",
     "(d0, d1, d2) -> (d0 : batch, d2 - d1 : compressed, d1 : range)"),
    # --- level types and properties ---------------------------------------------------------------
    ("(i, j) -> (i : compressed(nonunique), j : singleton)", COO),
    ("(i, j) -> (i : compressed(nonunique), j : singleton(soa))",
     "(d0, d1) -> (d0 : compressed(nonunique), d1 : singleton(soa))"),
    ("(i, j) -> (i : compressed(nonordered, nonunique), j : singleton(soa, nonordered, nonunique))",
     "(d0, d1) -> (d0 : compressed(nonunique, nonordered), d1 : singleton(nonunique, nonordered, soa))"),
    ("(i, j) -> (i : loose_compressed, j : loose_compressed(nonordered))",
     "(d0, d1) -> (d0 : loose_compressed, d1 : loose_compressed(nonordered))"),
    ("(i, j, k) -> (i : loose_compressed(nonunique), j : singleton(nonunique), k : singleton)",
     "(d0, d1, d2) -> (d0 : loose_compressed(nonunique), d1 : singleton(nonunique), d2 : singleton)"),
    ("(i, j, k) -> (i : dense, j : compressed(nonunique), k : singleton(nonordered))",
     "(d0, d1, d2) -> (d0 : dense, d1 : compressed(nonunique), d2 : singleton(nonordered))"),
    ("(i, j) -> (i : dense, j : delta(1))", "(d0, d1) -> (d0 : dense, d1 : delta(1))"),
    ("(i, j) -> (i : dense, j : delta(32))", "(d0, d1) -> (d0 : dense, d1 : delta(32))"),
    ("(i, j) -> (i : dense, j : delta( 1 , packed ))", "(d0, d1) -> (d0 : dense, d1 : delta(1, packed))"),
    ("(i, j) -> (i : compressed, j : delta(8, packed))", "(d0, d1) -> (d0 : compressed, d1 : delta(8, packed))"),
    ("(i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : structured[2, 4])", S24),
    ("(i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : structured(2))", S24),
    ("(i, j) -> (j floordiv 8 : dense, i : dense, j % 8 : structured[0, 8])",
     "(d0, d1) -> (d1 floordiv 8 : dense, d0 : dense, d1 mod 8 : structured[0, 8])"),
    ("(i) -> (i floordiv 1 : dense, i mod 1 : structured[1, 1])",
     "(d0) -> (d0 floordiv 1 : dense, d0 mod 1 : structured[1, 1])"),
    ("(b, c, i, j) -> (b : batch, c : batch, i : dense, j : compressed)",
     "(d0, d1, d2, d3) -> (d0 : batch, d1 : batch, d2 : dense, d3 : compressed)"),
    ("(b, i) -> (b : batch, i : batch)", "(d0, d1) -> (d0 : batch, d1 : batch)"),
    # --- level variables and dimension bindings (MLIR syntax) ------------------------------------
    ("{l0, l1} (d0 = l0, d1 = l1) -> (l0 = d0 : dense, l1 = d1 : compressed)", CSR),
    ("{l0, l1} (i, j) -> (i : dense, j : compressed)", CSR),
    ("{a, b, c, d} (i = a * 2 + c, j = 3 * b + d) -> "
     "(a = i floordiv 2 : dense, b = j floordiv 3 : compressed, c = i mod 2 : dense, d = j mod 3 : dense)", BSR23),
    ("#sparse_tensor.encoding<{ map = {l0, l1, l2, l3} (d0 = l0 * 2 + l2, d1 = l1 * 3 + l3) -> "
     "(l0 = d0 // 2 : dense, l1 = d1 // 3 : compressed, l2 = d0 % 2 : dense, l3 = d1 % 3 : dense) }>", BSR23),
    ("{l0, l1} (i = l1, j = l0 + l1) -> (l0 = j - i : compressed, l1 = i : range)", DIAI),
    ("{s, r} (i = s - r, j = r) -> (s = i + j : compressed, r = j : range)",
     "(d0, d1) -> (d0 + d1 : compressed, d1 : range)"),
    ("{a, b} (i = a floordiv 2, j = b) -> (a = 2 * i : dense, b = j : compressed)",
     "(d0, d1) -> (2 * d0 : dense, d1 : compressed)"),
    # --- names that are DSL keywords elsewhere (contextual lexer) ---------------------------------
    ("(dense, compressed) -> (dense : dense, compressed : compressed)", CSR),
    ("(mod, floordiv) -> (mod floordiv 2 : dense, floordiv // 3 : compressed, mod mod 2 : dense, "
     "floordiv % 3 : dense)", BSR23),
    ("(map, posWidth) -> (posWidth - map : compressed, map : range), posWidth = 8", DIAI + ", posWidth = 8"),
    ("(range, packed) -> (range : dense, packed : delta(2, packed))",
     "(d0, d1) -> (d0 : dense, d1 : delta(2, packed))"),
    ("{dense, batch} (soa = dense, l0 = batch) -> (dense = soa : dense, batch = l0 : compressed)", CSR),
]


@pytest.mark.parametrize("text, canonical", VALID, ids=[f"{k}" for k in range(len(VALID))])
def test_canonical_text(text, canonical):
    fmt = TensorFormat.parse(text)
    assert str(fmt) == canonical
    assert fmt.signature == canonical
    again = TensorFormat.parse(canonical)
    assert again == fmt and hash(again) == hash(fmt)
    assert str(again) == canonical
    assert ustc.parse(text) is fmt  # ustc.parse and TensorFormat.parse share one cache


def test_table_size():
    assert len(VALID) >= 40


def test_table_covers_every_level_type():
    texts = " ".join(c for _, c in VALID)
    for level_type in LEVEL_TYPES:
        assert re.search(rf": {level_type.keyword}\b", texts), level_type.keyword
    for prop in ustc.LevelProperty:
        assert prop.value in texts
    for width in (8, 16, 32, 64):
        assert f"Width = {width}" in texts


def _named_calls(nf) -> list[str]:
    calls = [f"{nf.name}({', '.join(map(str, nf.example))})"] if nf.example else []
    if not nf.example or "=" in nf.params:  # parameterless or with defaults: the bare name works too
        calls.append(nf.name)
    return calls


@pytest.mark.parametrize("nf", formats.NAMED, ids=lambda nf: nf.name)
def test_every_named_format_is_in_the_table(nf):
    named = {m.group(1).lower() for text, _ in VALID if (m := re.match(r"\s*([A-Za-z_]\w*)\s*(\(|#|$)", text))}
    assert nf.name.lower() in named, f"add {nf.name} to VALID"


@pytest.mark.parametrize("nf", formats.NAMED, ids=lambda nf: nf.name)
def test_named_format_parses_to_its_builder(nf):
    built = nf.format()
    for call in _named_calls(nf):
        for spelling in (call, call.lower(), call.upper()):
            assert TensorFormat.parse(spelling) == built
    assert built.name is not None
    # the canonical text of a named format is a DSL text that parses back to it
    assert TensorFormat.parse(str(built)) == built
    assert TensorFormat.parse(built.text) == built
    # the named constant / builder is reachable as ustc.formats.<NAME>
    member = getattr(formats, nf.name)
    assert (member(*nf.example) if callable(member) else member) == built


def test_named_format_builders():
    assert formats.BSR(2, 3) == TensorFormat.parse(BSR23)
    assert formats.DELTA(4, packed=True) == TensorFormat.parse("DELTA(4, packed)")
    assert formats.DELTA(4) != formats.DELTA(4, packed=True)
    assert formats.Structured(2, 4) == TensorFormat.parse(S24)
    assert formats.CSF(4) == TensorFormat.parse("CSF(4)")
    assert formats.COO() == formats.COO(2) == TensorFormat.parse(COO)
    assert formats.by_name("bsr", 2, 3) == formats.BSR(2, 3)
    assert formats.names() == tuple(nf.name for nf in formats.NAMED)
    assert [row[0] for row in formats.table()] == [nf.name + nf.params for nf in formats.NAMED]
    for name, example, text in formats.table():
        assert TensorFormat.parse(example) == TensorFormat.parse(text)


def test_named_format_display_name_does_not_affect_equality():
    csr = TensorFormat.parse("(i, j) -> (i : dense, j : compressed)")
    assert formats.CSR.name == "CSR" and csr.name is None
    assert csr == formats.CSR and hash(csr) == hash(formats.CSR)
    assert csr.named("mine") == csr and csr.named("mine").name == "mine"


def test_equal_formats_have_equal_signature_and_digest():
    a = TensorFormat.parse("(i, j) -> (i : dense, j : compressed)")
    b = TensorFormat.parse("#sparse_tensor.encoding<{ map = (r, c) -> (r : dense, c : compressed) }>")
    c = TensorFormat.parse("CSC")
    assert a == b and a.digest == b.digest and len(a.digest) == 64
    assert a != c and a.digest != c.digest
    assert a != TensorFormat.parse("(i, j) -> (i : dense, j : compressed), posWidth = 32")
    assert a != "(d0, d1) -> (d0 : dense, d1 : compressed)"  # a format is not its text


# --------------------------------------------------------------------------- worked examples (design §2)

# A is 4 x 8 with entries (0,0)=1 (0,1)=2 (1,1)=3 (1,3)=4 (2,2)=5 (3,3)=6
ROWS = np.array([0, 0, 1, 1, 2, 3])
COLS = np.array([0, 1, 1, 3, 2, 3])


def test_bsr_worked_example():
    bsr = TensorFormat.parse("(i, j) -> (i floordiv 2 : dense, j floordiv 2 : compressed, i mod 2 : dense, "
                             "j mod 2 : dense)")
    assert bsr == formats.BSR(2, 2)
    assert bsr.level_shape((4, 8)) == (2, 4, 2, 2)
    assert formats.BSR(2, 3).level_shape((5, 7)) == (3, 3, 2, 3)
    assert [str(e) for e in bsr.dim_exprs] == ["2 * l0 + l2", "2 * l1 + l3"]
    assert [str(e) for e in formats.BSR(2, 3).dim_exprs] == ["2 * l0 + l2", "3 * l1 + l3"]
    assert bsr.buffers == ((1, "pos"), (1, "crd"))
    assert bsr.level_formats == (ustc.LevelFormat.DENSE, ustc.LevelFormat.COMPRESSED,
                                 ustc.LevelFormat.DENSE, ustc.LevelFormat.DENSE)
    assert all(bsr.level_is_ordered(k) and bsr.level_is_unique(k) for k in range(4))
    lc = bsr.level_coordinates((ROWS, COLS))
    assert [c.tolist() for c in lc] == [[0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 1],
                                        [0, 0, 1, 1, 0, 1], [0, 1, 1, 1, 0, 1]]
    # the nonzero blocks (level 0, level 1) are (0, 0), (0, 1), (1, 1): pos[1] = [0, 2, 3], crd[1] = [0, 1, 1]
    assert sorted(set(zip(lc[0].tolist(), lc[1].tolist()))) == [(0, 0), (0, 1), (1, 1)]
    back = bsr.dim_coordinates(lc)
    assert back[0].tolist() == ROWS.tolist() and back[1].tolist() == COLS.tolist()
    assert bsr.level_coordinates((3, 5)) == (1, 2, 1, 1)
    assert bsr.dim_coordinates((1, 2, 1, 1)) == (3, 5)


def test_dia_worked_example():
    diai, diaj = formats.DIAI, formats.DIAJ
    assert diai.level_shape((4, 8)) == (11, 4)
    assert diaj.level_shape((4, 8)) == (11, 8)
    assert [str(e) for e in diai.dim_exprs] == ["l1", "l0 + l1"]
    assert [str(e) for e in diaj.dim_exprs] == ["l1 - l0", "l1"]
    assert diai.buffers == ((0, "pos"), (0, "crd"))
    assert diai.level_formats == (ustc.LevelFormat.COMPRESSED, ustc.LevelFormat.RANGE)
    offsets, rows = diai.level_coordinates((ROWS, COLS))
    assert offsets.tolist() == [0, 1, 0, 2, 0, 0] and rows.tolist() == ROWS.tolist()
    assert sorted(set(offsets.tolist())) == [0, 1, 2]  # three diagonals: crd[0] = [0, 1, 2]
    for fmt in (diai, diaj, formats.SkewDIAI, formats.SkewDIAJ):
        back = fmt.dim_coordinates(fmt.level_coordinates((ROWS, COLS)))
        assert back[0].tolist() == ROWS.tolist() and back[1].tolist() == COLS.tolist()
    assert formats.SkewDIAI.level_coordinates((2, 5)) == (7, 2)
    assert [str(e) for e in formats.SkewDIAI.dim_exprs] == ["l1", "l0 - l1"]
    assert [str(e) for e in formats.SkewDIAJ.dim_exprs] == ["l0 - l1", "l1"]


def test_coo_and_csr_worked_example():
    coo, csr = formats.COO(), formats.CSR
    assert coo.buffers == ((0, "pos"), (0, "crd"), (1, "crd"))
    assert csr.buffers == ((1, "pos"), (1, "crd"))
    assert (coo.level_is_unique(0), coo.level_is_ordered(0), coo.level_is_unique(1), coo.level_is_ordered(1)) == (False, True, True, True)
    assert coo.level_shape((4, 8)) == csr.level_shape((4, 8)) == (4, 8)
    assert [str(e) for e in coo.dim_exprs] == ["l0", "l1"]
    assert [str(e) for e in formats.CSC.dim_exprs] == ["l1", "l0"]
    lc = formats.CSC.level_coordinates((ROWS, COLS))
    assert lc[0].tolist() == COLS.tolist() and lc[1].tolist() == ROWS.tolist()
    unordered = TensorFormat.parse("(i, j) -> (i : compressed(nonunique, nonordered), j : singleton(nonordered))")
    assert [unordered.level_is_unique(k) for k in range(2)] == [False, True]
    assert [unordered.level_is_ordered(k) for k in range(2)] == [False, False]


def test_delta_structured_and_batch_facts():
    delta = TensorFormat.parse("DELTA(2)")
    assert delta.buffers == ((1, "pos"), (1, "crd"))
    assert delta.level_shape((1, 16)) == (1, 16)
    s24 = TensorFormat.parse("Structured(2, 4)")
    assert s24.buffers == ((2, "crd"),)
    assert s24.level_shape((3, 10)) == (3, 3, 4)
    assert [str(e) for e in s24.dim_exprs] == ["l0", "4 * l1 + l2"]
    batched = formats.BatchedCSR
    assert batched.batch_levels == 1 and formats.CSR.batch_levels == 0
    assert batched.buffers == ((2, "pos"), (2, "crd"))
    scaled = TensorFormat.parse("(i, j) -> (3 * i : dense, j : compressed)")
    assert scaled.level_shape((4, 5)) == (10, 5)
    assert [str(e) for e in scaled.dim_exprs] == ["l0 floordiv 3", "l1"]
    assert scaled.dim_coordinates(scaled.level_coordinates((3, 4))) == (3, 4)


def test_level_shape_edge_cases():
    assert formats.DIAI.level_shape((0, 5)) == (0, 0)
    assert formats.BSR(2, 3).level_shape((0, 0)) == (0, 0, 2, 3)
    with pytest.raises(ustc.FormatError):
        formats.CSR.level_shape((4,))


def test_facts_and_counts():
    f = TensorFormat.parse(BSR23 + ", posWidth = 32, crdWidth = 16")
    assert (f.ndim, f.rank, f.nlevels, f.pos_width, f.crd_width) == (2, 2, 4, 32, 16)
    assert [d.name for d in f.dims] == ["d0", "d1"]
    assert pickle.loads(pickle.dumps(f)) == f
