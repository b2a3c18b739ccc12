"""Formats: the main API's whole-format properties and nvmath-python's format objects on ustc."""

import pytest

import ustc
from ustc import formats, ust
from ustc.ust import Dimension, LevelFormat, LevelProperty, NamedFormats, TensorFormat

i, j, k = (Dimension(dimension_name=n) for n in "ijk")


# -- the main API ---------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt, unique, ordered", [
    (formats.CSR, True, True),
    (formats.COO, True, True),          # the singleton tells repeated rows apart
    (formats.COO(3), True, True),
    ("(i, j) -> (i : compressed(nonunique), j : singleton(nonunique))", False, True),
    ("(i, j) -> (i : dense, j : compressed(nonunique))", False, True),
    ("(i, j) -> (i : compressed(nonordered), j : singleton(nonordered))", True, False),
    ("(i, j, k) -> (i : compressed(nonunique), j : singleton, k : dense)", True, True),
])
def test_is_unique_and_is_ordered_are_format_properties(fmt, unique, ordered):
    fmt = ustc.parse(fmt) if isinstance(fmt, str) else fmt
    assert fmt.is_unique is unique and fmt.is_ordered is ordered


def test_per_level_queries_keep_their_meaning():
    coo = formats.COO
    assert [coo.level_is_unique(n) for n in range(2)] == [False, True]
    assert all(coo.level_is_ordered(n) for n in range(2))


def test_counts_and_maps_in_nvmath_form():
    bsr = formats.BSR(2, 2)
    assert (bsr.num_dimensions, bsr.num_levels, bsr.dimensions) == (2, 4, bsr.dims)
    assert bsr.dim2lvl([2, 1]) == [1, 0, 0, 1] and bsr.lvl2dim([1, 0, 0, 1]) == [2, 1]
    assert bsr.dim2lvl([8, 4], as_size=True) == [4, 2, 2, 2]
    assert formats.DIAJ.dim2lvl([2, 1]) == [-1, 1] and formats.DIAJ.lvl2dim([-1, 1]) == [2, 1]
    assert formats.CSR.is_identity and not formats.CSC.is_identity


def test_coo_dense_and_csf_are_formats_and_builders():
    for family, default, other in ((formats.COO, 2, 3), (formats.Dense, 2, 3), (formats.CSF, 3, 4)):
        assert isinstance(family, ustc.TensorFormat) and family.ndim == default
        assert family() == family and family(other).ndim == other
    t = ustc.Tensor.from_dense([[1.0, 0.0], [0.0, 2.0]], formats.COO)
    assert t.format == formats.COO(2) and t.nse == 2


# -- nvmath-python's objects ----------------------------------------------------------------------
SAME = [
    ("CSR", formats.CSR), ("CSC", formats.CSC), ("COO", formats.COO), ("DCSR", formats.DCSR),
    ("DCSC", formats.DCSC), ("CROW", formats.CROW), ("CCOL", formats.CCOL), ("DIAI", formats.DIAI),
    ("DIAJ", formats.DIAJ), ("SkewDIAI", formats.SkewDIAI), ("SkewDIAJ", formats.SkewDIAJ),
    ("DenseMatrixRight", formats.Dense),
]
BUILT = [
    (lambda: NamedFormats.BSRRight((2, 3)), formats.BSR(2, 3)),
    (lambda: NamedFormats.BSCRight((2, 3)), formats.BSC(2, 3)),
    (lambda: NamedFormats.DELTA(4), formats.DELTA(4)),
    (lambda: NamedFormats.Structured(2, 4), formats.Structured(2, 4)),
    (lambda: NamedFormats.COOd(2), formats.COO),
    (lambda: NamedFormats.COOd(3), formats.COO(3)),
    (lambda: NamedFormats.CSFd(3), formats.CSF(3)),
    (lambda: NamedFormats.DensedRight(3), formats.Dense(3)),
    (lambda: NamedFormats.CSRd(batch_dim=1), formats.BatchedCSR),   # ustc's uniform batch
]


@pytest.mark.parametrize("name, fmt", SAME)
def test_named_formats_equal_ustc_named_formats(name, fmt):
    named = getattr(NamedFormats, name)
    assert named == fmt and named.ustc == fmt and hash(named) == hash(fmt)


@pytest.mark.parametrize("build, fmt", BUILT)
def test_named_builders_equal_ustc_builders(build, fmt):
    assert build() == fmt


def test_batched_csr_means_a_csr_per_sample():
    batched = NamedFormats.BatchedCSR
    assert [v for v in batched.levels.values()] == [LevelFormat.DENSE, LevelFormat.DENSE, LevelFormat.COMPRESSED]
    assert batched != formats.BatchedCSR
    assert batched.ustc == ustc.parse("(b, i, j) -> (b : dense, i : dense, j : compressed)")


def test_every_named_format_builds():
    builders = {"BlockVector": (4,), "BSRRight": ((2, 2),), "BSRLeft": ((2, 2),), "BSCRight": ((2, 2),),
                "BSCLeft": ((2, 2),), "DELTA": (2,), "Structured": (2, 4), "BSR3": ((2, 2, 2),),
                "DensedRight": (3,), "DensedLeft": (3,), "COOd": (2, 1), "CSRd": (1, 1), "CSCd": (1, 1),
                "BSRRightd": ((2, 2), 1, 1), "BSCRightd": ((2, 2), 1, 1), "CSFd": (4,)}
    for name, args in builders.items():
        assert isinstance(getattr(NamedFormats, name)(*args), TensorFormat), name
    constants = ["Scalar", "DenseVector", "SparseVector", "DenseMatrixRight", "DenseMatrixLeft",
                 "BatchedDIAINonUniform", "BatchedDIAIUniform"]
    for name in constants:
        assert isinstance(getattr(NamedFormats, name), TensorFormat), name


def test_format_properties_are_bools():
    for fmt in (NamedFormats.COO, NamedFormats.CSR, NamedFormats.CSC, NamedFormats.BSRRight((4, 8))):
        assert fmt.is_unique is True and fmt.is_ordered is True
    assert NamedFormats.CSR.is_identity and not NamedFormats.CSC.is_identity
    nonunique = TensorFormat([i, j], {i: (LevelFormat.COMPRESSED, LevelProperty.NONUNIQUE),
                                      j: (LevelFormat.SINGLETON, LevelProperty.NONUNIQUE)})
    assert nonunique.is_unique is False
    unordered = TensorFormat([i, j], {i: LevelFormat.DENSE, j: (LevelFormat.COMPRESSED, LevelProperty.UNORDERED)})
    assert unordered.is_ordered is False


def test_names_counts_and_maps():
    bsr = NamedFormats.BSRRight((4, 8))
    assert (bsr.name, bsr.num_dimensions, bsr.num_levels) == ("BSRRight4x8", 2, 4)
    assert NamedFormats.BSRLeft((2, 2)).dim2lvl([2, 1]) == [1, 0, 1, 0]
    assert NamedFormats.BSCLeft((2, 2)).lvl2dim([0, 1, 1, 0]) == [2, 1]
    assert NamedFormats.DIAI.dim2lvl([8, 4], True) == [11, 8]
    for fmt in (NamedFormats.SkewDIAJ, NamedFormats.DELTA(2), NamedFormats.CSC):
        for crd in ([0, 0], [3, 7], [9, 2]):
            assert fmt.lvl2dim(fmt.dim2lvl(crd)) == crd


def test_levels_are_the_dict_given_and_repr_is_nvmath_style():
    levels = {i // 2: LevelFormat.DENSE, j // 3: LevelFormat.COMPRESSED, i % 2: LevelFormat.DENSE,
              j % 3: LevelFormat.DENSE}
    fmt = TensorFormat([i, j], levels, name="BSR")
    assert fmt.levels is levels and fmt.dimensions == [i, j] and fmt.name == "BSR"
    assert repr(fmt) == ("[i, j] -> ((i // 2): <LevelFormat.DENSE>, (j // 3): <LevelFormat.COMPRESSED>, "
                         "(i % 2): <LevelFormat.DENSE>, (j % 3): <LevelFormat.DENSE>)")
    assert repr(NamedFormats.COO) == ("[i, j] -> (i: (<LevelFormat.COMPRESSED>, <LevelProperty.NONUNIQUE>), "
                                      "j: <LevelFormat.SINGLETON>)")
    assert repr(NamedFormats.DELTA(2)) == "[i, j] -> (i: <LevelFormat.DENSE>, j: (<LevelFormat.DELTA>, 2))"


def test_property_helpers():
    assert ust.is_ordered(None) and ust.is_unique(None)
    assert not ust.is_ordered(LevelProperty.UNORDERED) and ust.is_ordered(LevelProperty.NONUNIQUE)
    assert not ust.is_unique((LevelProperty.ORDERED, LevelProperty.NONUNIQUE))
    assert ust.is_unique((LevelProperty.ORDERED, LevelProperty.UNIQUE))


@pytest.mark.parametrize("dims, levels", [
    ([i, i], {i: LevelFormat.DENSE}),
    ([i], {i: (LevelFormat.DENSE, (LevelProperty.NONUNIQUE, LevelProperty.UNIQUE))}),
    ([i], {j: LevelFormat.DENSE}),
    ([i], {i + 1: LevelFormat.DENSE}),
    ([i, j, k], {i: LevelFormat.DENSE, j: LevelFormat.COMPRESSED}),
    ([i], {i % 4: LevelFormat.DENSE}),
    ([i], {i // 4: LevelFormat.DENSE}),
    ([i], {i: LevelFormat.RANGE}),
    ([i, j], {i + j: LevelFormat.DENSE}),
    ("ij", {i: LevelFormat.DENSE}),
    ([i], [(i, LevelFormat.DENSE)]),
])
def test_invalid_formats_raise_type_error(dims, levels):
    with pytest.raises(TypeError) as info:
        TensorFormat(dims, levels)
    assert isinstance(info.value, ustc.FormatError)


def test_ustc_formats_seen_through_the_compat_view():
    view = TensorFormat.from_ustc(formats.DIAJ)
    assert view == formats.DIAJ and view.name == "DIAJ"
    assert repr(view) == "[i, j] -> ((j - i): <LevelFormat.COMPRESSED>, j: <LevelFormat.RANGE>)"
    assert TensorFormat.from_ustc(view.ustc).levels == view.levels


# -- singleton chains: nvmath-python's uniqueness is per level, ustc's per coordinate prefix ----------
S, C = LevelFormat.SINGLETON, LevelFormat.COMPRESSED
NONUNIQUE_HEAD = (C, LevelProperty.NONUNIQUE)


@pytest.mark.parametrize("rank", [3, 4, 5])
def test_cood_is_spelled_with_plain_singletons_and_stores_as_ustc_coo(rank):
    """nvmath-python writes an n-D COO as a nonunique compressed level followed by plain
    singletons (a singleton has one child per parent, so it has no duplicate siblings); it is
    the same storage as ustc's COO(n), whose middle singletons are nonunique prefixes."""
    fmt = NamedFormats.COOd(rank)
    assert list(fmt.levels.values()) == [NONUNIQUE_HEAD] + [S] * (rank - 1)
    assert "NONUNIQUE" not in repr(fmt).split("),", 1)[1]
    assert fmt == formats.COO(rank) and fmt.ustc == formats.COO(rank)
    assert TensorFormat.from_ustc(formats.COO(rank)).levels == dict(fmt.levels)


def test_spelled_coo3_holds_repeated_prefixes():
    fmt = TensorFormat([i, j, k], {i: NONUNIQUE_HEAD, j: S, k: S})
    t = ust.Tensor.from_package(ustc.Tensor.from_coo(
        [[0, 0, 1], [2, 2, 0], [0, 1, 3]], [1.0, 2.0, 3.0], (2, 3, 4), formats.COO(3)).to_dense())
    c = t.convert(tensor_format=fmt)
    assert c.crd(1).tolist() == [2, 2, 0]  # the prefix (0, 2) repeats
    assert (c.get_value([0, 2, 0]), c.get_value([0, 2, 1]), c.get_value([1, 0, 3])) == (1.0, 2.0, 3.0)


def test_unique_spelled_out_keeps_a_unique_prefix():
    """UNIQUE on a middle singleton is kept (ustc's unique prefix) and printed back explicitly."""
    fmt = TensorFormat([i, j, k], {i: NONUNIQUE_HEAD, j: (S, LevelProperty.UNIQUE), k: S})
    assert fmt != formats.COO(3) and not fmt.ustc.level_is_unique(0) and fmt.ustc.level_is_unique(1)
    assert TensorFormat.from_ustc(fmt.ustc).levels[j] == (S, LevelProperty.UNIQUE)


def test_only_middle_singletons_under_a_nonunique_parent_change():
    assert TensorFormat([i, j, k], {i: C, j: S, k: S}).ustc.level_is_unique(1)   # unique parent
    hybrid = TensorFormat([i, j, k], {i: NONUNIQUE_HEAD, j: S, k: LevelFormat.DENSE})
    assert hybrid.ustc.level_is_unique(1)                                        # last of its chain
