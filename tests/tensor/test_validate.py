"""Buffer validation: every level type's broken buffers raise StorageError naming the level,
the buffer and the first bad index; the default ``from_package`` check is structural only;
inputs are never mutated."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from ustc import Tensor, TensorFormat
from ustc import formats as F

LOOSE = TensorFormat.parse("(i, j) -> (i : dense, j : loose_compressed)")
CSR_NONUNIQUE = TensorFormat.parse("(i, j) -> (i : dense, j : compressed(nonunique))")
CSR_NONORDERED = TensorFormat.parse("(i, j) -> (i : dense, j : compressed(nonordered))")
COO_LOOSE = TensorFormat.parse("(i, j) -> (i : loose_compressed(nonunique), j : singleton)")


def build(fmt, shape, buffers, values):
    fmt = TensorFormat.parse(fmt) if isinstance(fmt, str) else fmt
    bufs = {k: (v if isinstance(v, np.ndarray) else np.asarray(v, dtype=np.int32)) for k, v in buffers.items()}
    return Tensor(fmt, shape, bufs, np.asarray(values, dtype=np.float64))


def snapshot(t):
    return {k: np.array(v, copy=True) for k, v in t._buffers.items()}, np.array(t._values, copy=True)


def assert_unchanged(t, snap):
    bufs, vals = snap
    for k, v in bufs.items():
        np.testing.assert_array_equal(t._buffers[k], v)
        assert t._buffers[k].dtype == v.dtype
    np.testing.assert_array_equal(t._values, vals)


def expect_invalid(t, *fragments):
    """``t.validate()`` raises StorageError whose message contains every fragment; nothing mutated."""
    snap = snapshot(t)
    with pytest.raises(ustc.StorageError) as info:
        t.validate()
    msg = str(info.value)
    for frag in fragments:
        assert frag in msg, (frag, msg)
    assert_unchanged(t, snap)
    return msg


def expect_structural(fmt, shape, buffers, values, *fragments):
    """Construction itself (the O(levels) check) raises StorageError with the fragments."""
    with pytest.raises(ustc.StorageError) as info:
        build(fmt, shape, buffers, values)
    for frag in fragments:
        assert frag in str(info.value), (frag, str(info.value))


def valid(fmt, shape, buffers, values):
    t = build(fmt, shape, buffers, values)
    snap = snapshot(t)
    assert t.validate() is t
    assert_unchanged(t, snap)
    return t


# --------------------------------------------------------------------------- compressed

CSR_OK = {(1, "pos"): [0, 2, 3, 5], (1, "crd"): [0, 2, 1, 0, 3]}


def test_csr_valid_baseline():
    t = valid(F.CSR, (3, 4), CSR_OK, [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(t.to_dense(), [[1, 0, 2, 0], [0, 3, 0, 0], [4, 0, 0, 5]])


def test_pos_not_starting_at_zero():
    t = build(F.CSR, (3, 4), {(1, "pos"): [1, 2, 3, 5], (1, "crd"): [0, 2, 1, 0, 3]}, [1, 2, 3, 4, 5])
    expect_invalid(t, "level 1", "pos[0]")


def test_pos_decreasing():
    t = build(F.CSR, (3, 4), {(1, "pos"): [0, 3, 2, 5], (1, "crd"): [0, 2, 1, 0, 3]}, [1, 2, 3, 4, 5])
    expect_invalid(t, "level 1", "pos[2]")


def test_pos_end_beyond_crd():
    t = build(F.CSR, (3, 4), {(1, "pos"): [0, 2, 3, 6], (1, "crd"): [0, 2, 1, 0, 3]}, [1, 2, 3, 4, 5, 6])
    expect_invalid(t, "level 1", "pos[3]")


@pytest.mark.parametrize("pos", [[0, 2, 3, 5, 5], [0, 2, 5], [5]], ids=["long", "short", "one"])
def test_pos_wrong_length_is_structural(pos):
    expect_structural(F.CSR, (3, 4), {(1, "pos"): pos, (1, "crd"): [0, 2, 1, 0, 3]}, [1, 2, 3, 4, 5],
                      "level 1", "pos")


@pytest.mark.parametrize("bad, index", [(-1, 3), (4, 3), (100, 0)])
def test_crd_out_of_range(bad, index):
    crd = [0, 2, 1, 0, 3]
    crd[index] = bad
    crd_later = list(crd)
    if index < 4:
        crd_later[4] = 9  # a later bad entry must not be the one reported
    t = build(F.CSR, (3, 4), {(1, "pos"): [0, 2, 3, 5], (1, "crd"): crd_later}, [1, 2, 3, 4, 5])
    expect_invalid(t, "level 1", f"crd[{index}]", str(bad))


def test_crd_unsorted_on_ordered_level():
    bufs = {(1, "pos"): [0, 2, 3, 5], (1, "crd"): [2, 0, 1, 3, 0]}
    t = build(F.CSR, (3, 4), bufs, [1, 2, 3, 4, 5])
    expect_invalid(t, "level 1", "crd[1]")
    # the same buffers are fine where the level does not promise order
    u = valid(CSR_NONORDERED, (3, 4), bufs, [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(u.to_dense(), [[2, 0, 1, 0], [0, 3, 0, 0], [5, 0, 0, 4]])


def test_crd_repeated_on_unique_level():
    bufs = {(1, "pos"): [0, 2, 3, 5], (1, "crd"): [1, 1, 1, 0, 3]}
    expect_invalid(build(F.CSR, (3, 4), bufs, [1, 2, 3, 4, 5]), "level 1", "crd[1]")
    expect_invalid(build(CSR_NONORDERED, (3, 4), bufs, [1, 2, 3, 4, 5]), "level 1", "crd[1]")
    u = valid(CSR_NONUNIQUE, (3, 4), bufs, [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(u.to_dense(), [[0, 3, 0, 0], [0, 3, 0, 0], [4, 0, 0, 5]])


def test_repeat_across_segments_is_fine():
    valid(F.CSR, (3, 4), {(1, "pos"): [0, 1, 2, 3], (1, "crd"): [2, 2, 2]}, [1, 2, 3])


def test_dcsr_level0_errors():
    base = {(0, "pos"): [0, 2], (0, "crd"): [0, 2], (1, "pos"): [0, 1, 2], (1, "crd"): [1, 0]}
    valid(F.DCSR, (3, 2), base, [1, 2])
    expect_invalid(build(F.DCSR, (3, 2), {**base, (0, "crd"): [2, 0]}, [1, 2]), "level 0", "crd[1]")
    expect_invalid(build(F.DCSR, (3, 2), {**base, (0, "crd"): [0, 3]}, [1, 2]), "level 0", "crd[1]")
    expect_invalid(build(F.DCSR, (3, 2), {**base, (1, "crd"): [1, 2]}, [1, 2]), "level 1", "crd[1]")
    expect_structural(F.DCSR, (3, 2), {**base, (1, "pos"): [0, 2]}, [1, 2], "level 1", "pos")


def test_dia_offsets_range():
    # 3x5 DIAI: offsets j - i lie in [-2, 4]
    fmt = F.DIAI
    valid(fmt, (3, 5), {(0, "pos"): [0, 2], (0, "crd"): [-2, 4]}, np.ones(6))
    expect_invalid(build(fmt, (3, 5), {(0, "pos"): [0, 2], (0, "crd"): [-3, 0]}, np.ones(6)),
                   "level 0", "crd[0]", "-3")
    expect_invalid(build(fmt, (3, 5), {(0, "pos"): [0, 2], (0, "crd"): [0, 5]}, np.ones(6)),
                   "level 0", "crd[1]", "5")
    expect_invalid(build(fmt, (3, 5), {(0, "pos"): [0, 2], (0, "crd"): [1, 0]}, np.ones(6)),
                   "level 0", "crd[1]")


# --------------------------------------------------------------------------- singleton / COO

COO_OK = {(0, "pos"): [0, 4], (0, "crd"): [0, 0, 1, 2], (1, "crd"): [1, 3, 0, 2]}


def test_coo_valid_baseline():
    t = valid(F.COO(), (3, 4), COO_OK, [1, 2, 3, 4])
    assert t.get_value(0, 3) == 2


def test_coo_pairs_out_of_lexicographic_order():
    t = build(F.COO(), (3, 4), {**COO_OK, (1, "crd"): [3, 1, 0, 2]}, [1, 2, 3, 4])
    expect_invalid(t, "level 1", "crd[1]")


def test_coo_rows_out_of_order():
    t = build(F.COO(), (3, 4), {**COO_OK, (0, "crd"): [0, 1, 0, 2]}, [1, 2, 3, 4])
    expect_invalid(t, "level 0", "crd[2]")


def test_coo_repeated_pair():
    t = build(F.COO(), (3, 4), {**COO_OK, (0, "crd"): [0, 0, 1, 1], (1, "crd"): [1, 1, 0, 2]}, [1, 2, 3, 4])
    expect_invalid(t, "level 1", "crd[1]")
    nonunique = TensorFormat.parse("(i, j) -> (i : compressed(nonunique), j : singleton(nonunique))")
    u = valid(nonunique, (3, 4), {**COO_OK, (0, "crd"): [0, 0, 1, 1], (1, "crd"): [1, 1, 0, 2]}, [1, 2, 3, 4])
    assert u.get_value(0, 1) == 3


def test_coo_same_column_in_different_rows_is_fine():
    valid(F.COO(), (3, 4), {**COO_OK, (0, "crd"): [0, 1, 2, 2], (1, "crd"): [3, 3, 0, 3]}, [1, 2, 3, 4])


def test_singleton_out_of_range():
    t = build(F.COO(), (3, 4), {**COO_OK, (1, "crd"): [1, 3, 0, 4]}, [1, 2, 3, 4])
    expect_invalid(t, "level 1", "crd[3]")
    t = build(F.COO(), (3, 4), {**COO_OK, (1, "crd"): [1, -1, 0, 2]}, [1, 2, 3, 4])
    expect_invalid(t, "level 1", "crd[1]")


def test_singleton_too_short_is_structural():
    expect_structural(F.COO(), (3, 4), {**COO_OK, (1, "crd"): [1, 3, 0]}, [1, 2, 3, 4], "level 1", "crd")


def test_coo3_middle_singleton_order():
    fmt = F.COO(3)
    ok = {(0, "pos"): [0, 3], (0, "crd"): [0, 0, 1], (1, "crd"): [1, 1, 0], (2, "crd"): [0, 2, 0]}
    valid(fmt, (2, 2, 3), ok, [1, 2, 3])
    expect_invalid(build(fmt, (2, 2, 3), {**ok, (2, "crd"): [2, 0, 0]}, [1, 2, 3]), "level 2", "crd[1]")
    expect_invalid(build(fmt, (2, 2, 3), {**ok, (1, "crd"): [1, 0, 0]}, [1, 2, 3]), "level 1", "crd[1]")


# --------------------------------------------------------------------------- loose_compressed

LOOSE_OK = {(1, "pos"): [0, 2, 2, 3, 4, 5], (1, "crd"): [0, 3, 1, 2, 9]}


def test_loose_valid_with_unused_tail():
    # the last crd entry belongs to no segment: its value (and out-of-range coordinate) are ignored
    t = build(LOOSE, (3, 4), {(1, "pos"): [0, 2, 2, 3, 3, 4], (1, "crd"): [0, 3, 1, 2, 9]}, [1, 2, 3, 4, 5])
    t.validate()
    np.testing.assert_array_equal(t.to_dense(), [[1, 0, 0, 2], [0, 3, 0, 0], [0, 0, 4, 0]])


def test_loose_segments_overlap():
    t = build(LOOSE, (3, 4), {(1, "pos"): [0, 2, 1, 3, 3, 3], (1, "crd"): [0, 1, 3]}, [1, 2, 3])
    expect_invalid(t, "level 1", "pos[2:4]", "overlap")


def test_loose_segment_reversed_or_past_end():
    t = build(LOOSE, (3, 4), {(1, "pos"): [0, 2, 3, 2, 3, 3], (1, "crd"): [0, 1, 3]}, [1, 2, 3])
    expect_invalid(t, "level 1", "pos[2:4]")
    t = build(LOOSE, (3, 4), {(1, "pos"): [0, 2, 2, 3, 3, 5], (1, "crd"): [0, 1, 3]}, [1, 2, 3, 4, 5])
    expect_invalid(t, "level 1", "pos[4:6]")


def test_loose_unsorted_within_segment():
    t = build(LOOSE, (3, 4), {(1, "pos"): [0, 2, 2, 2, 2, 2], (1, "crd"): [3, 1]}, [1, 2])
    expect_invalid(t, "level 1", "crd[1]")


def test_loose_pos_wrong_length_is_structural():
    expect_structural(LOOSE, (3, 4), {(1, "pos"): [0, 2, 2, 3], (1, "crd"): [0, 1, 3]}, [1, 2, 3],
                      "level 1", "pos")


def test_loose_with_singleton_child():
    ok = {(0, "pos"): [0, 3], (0, "crd"): [0, 0, 2], (1, "crd"): [1, 2, 0]}
    valid(COO_LOOSE, (3, 3), ok, [1, 2, 3])
    expect_invalid(build(COO_LOOSE, (3, 3), {**ok, (1, "crd"): [2, 1, 0]}, [1, 2, 3]), "level 1", "crd[1]")


# --------------------------------------------------------------------------- delta


def _delta(fmt, shape, pos, gaps, values, dtype=np.uint8):
    return build(fmt, shape, {(1, "pos"): np.asarray(pos, dtype=np.int32),
                              (1, "crd"): np.asarray(gaps, dtype=dtype)}, values)


def test_delta_valid_design_row():
    t = _delta(F.DELTA(2), (1, 16), [0, 5], [0, 3, 3, 3, 2], [1, 0, 0, 0, 2])
    t.validate()
    assert t.get_value(0, 15) == 2


def test_delta_gap_wider_than_b_bits():
    t = _delta(F.DELTA(2), (1, 16), [0, 3], [0, 3, 5], [1, 2, 3])
    expect_invalid(t, "level 1", "crd[2]", "2 bits")


def test_delta_decoded_coordinate_out_of_range():
    t = _delta(F.DELTA(2), (1, 8), [0, 3], [3, 3, 3], [1, 2, 3])  # coordinates 3, 7, 11
    expect_invalid(t, "level 1", "crd", "[2]", "11")


def test_delta_pos_errors():
    expect_invalid(_delta(F.DELTA(4), (2, 8), [0, 2, 1], [0, 1], [1, 2]), "level 1", "pos[2]")
    expect_invalid(_delta(F.DELTA(4), (2, 8), [1, 2, 2], [0, 1], [1, 2]), "level 1", "pos[0]")
    expect_structural(F.DELTA(4), (2, 8), {(1, "pos"): [0, 2], (1, "crd"): np.array([0, 1], np.uint8)},
                      [1, 2], "level 1", "pos")


def test_delta_packed_too_few_words_is_structural():
    # 17 two-bit entries need 2 words; one is given
    expect_structural(F.DELTA(2, True), (1, 40),
                      {(1, "pos"): np.array([0, 17], np.int32), (1, "crd"): np.array([0], np.uint32)},
                      np.ones(17), "level 1", "crd")


def test_delta_packed_decoded_out_of_range():
    word = 0
    for k in range(5):
        word |= 3 << (2 * k)  # five gaps of 3: coordinates 3, 7, 11, 15, 19
    t = _delta(F.DELTA(2, True), (1, 16), [0, 5], [word], np.ones(5), dtype=np.uint32)
    expect_invalid(t, "level 1", "[4]", "19")


# --------------------------------------------------------------------------- structured

S24 = F.Structured(2, 4)


def test_structured_valid_baseline():
    t = valid(S24, (1, 8), {(2, "crd"): [0, 3, 1, 2]}, [1, 2, 3, 4])
    np.testing.assert_array_equal(t.to_dense(), [[1, 0, 0, 2, 0, 3, 4, 0]])


def test_structured_wrong_count():
    expect_invalid(build(S24, (1, 8), {(2, "crd"): [0, 3, 1, 2, 3]}, [1, 2, 3, 4, 5]), "level 2", "crd", "5")
    expect_structural(S24, (1, 8), {(2, "crd"): [0, 3, 1]}, [1, 2, 3], "level 2", "crd")


def test_structured_unsorted_or_repeated_block():
    expect_invalid(build(S24, (1, 8), {(2, "crd"): [0, 3, 2, 1]}, [1, 2, 3, 4]), "level 2", "crd[3]")
    expect_invalid(build(S24, (1, 8), {(2, "crd"): [1, 1, 0, 2]}, [1, 2, 3, 4]), "level 2", "crd[1]")


def test_structured_sorted_across_blocks_restarts():
    valid(S24, (1, 8), {(2, "crd"): [2, 3, 0, 1]}, [1, 2, 3, 4])


def test_structured_crd_out_of_block():
    expect_invalid(build(S24, (1, 8), {(2, "crd"): [0, 4, 1, 2]}, [1, 2, 3, 4]), "level 2", "crd[1]", "4")
    expect_invalid(build(S24, (1, 8), {(2, "crd"): [0, 1, -1, 2]}, [1, 2, 3, 4]), "level 2", "crd[2]")


# --------------------------------------------------------------------------- values, dense, batch


@pytest.mark.parametrize("fmt, shape, buffers, nvalues", [
    (F.CSR, (3, 4), CSR_OK, 5),
    (F.COO(), (3, 4), COO_OK, 4),
    (F.Dense(2), (3, 4), {}, 12),
    (F.BSR(2, 2), (4, 4), {(1, "pos"): [0, 1, 2], (1, "crd"): [0, 1]}, 8),
    (F.DIAI, (3, 5), {(0, "pos"): [0, 2], (0, "crd"): [-2, 4]}, 6),
    (S24, (1, 8), {(2, "crd"): [0, 3, 1, 2]}, 4),
], ids=["CSR", "COO", "Dense", "BSR", "DIAI", "Structured"])
def test_values_too_short(fmt, shape, buffers, nvalues):
    valid(fmt, shape, buffers, np.arange(1, nvalues + 1))
    with pytest.raises(ustc.StorageError, match="values"):
        build(fmt, shape, buffers, np.arange(1, nvalues))


def test_values_longer_is_fine():
    t = valid(F.CSR, (3, 4), CSR_OK, np.arange(1, 9))
    assert t.nse == 5


def test_buffer_set_must_match_format():
    with pytest.raises(ustc.StorageError):
        build(F.CSR, (3, 4), {(1, "pos"): [0, 2, 3, 5]}, [1, 2, 3, 4, 5])
    with pytest.raises(ustc.StorageError):
        build(F.CSR, (3, 4), {**CSR_OK, (0, "pos"): [0, 3]}, [1, 2, 3, 4, 5])
    with pytest.raises(ustc.StorageError):
        Tensor(F.CSR, (3, 4), {(1, "pos"): np.array([0.0, 2, 3, 5]), (1, "crd"): np.array([0, 2, 1, 0, 3])},
               np.ones(5))


BATCH_POS = np.array([[0, 1, 2], [0, 0, 1]], dtype=np.int64)
BATCH_CRD = np.array([[1, 2], [0, 0]], dtype=np.int64)
BATCH_VALS = np.array([[1.0, 2.0], [3.0, 0.0]])


def test_batched_csr_errors():
    t = Tensor(F.BatchedCSR, (2, 2, 3), {(2, "pos"): BATCH_POS, (2, "crd"): BATCH_CRD}, BATCH_VALS)
    t.validate()
    bad = BATCH_CRD.copy()
    bad[1, 0] = 3
    expect_invalid(Tensor(F.BatchedCSR, (2, 2, 3), {(2, "pos"): BATCH_POS, (2, "crd"): bad}, BATCH_VALS),
                   "level 2", "crd")
    bad_pos = BATCH_POS.copy()
    bad_pos[1] = [0, 2, 1]
    expect_invalid(Tensor(F.BatchedCSR, (2, 2, 3), {(2, "pos"): bad_pos, (2, "crd"): BATCH_CRD}, BATCH_VALS),
                   "level 2", "pos")


def test_batched_error_names_batch():
    bad_pos = BATCH_POS.copy()
    bad_pos[1] = [0, 2, 1]
    t = Tensor(F.BatchedCSR, (2, 2, 3), {(2, "pos"): bad_pos, (2, "crd"): BATCH_CRD}, BATCH_VALS)
    with pytest.raises(ustc.StorageError, match="batch 1"):
        t.validate()


# --------------------------------------------------------------------------- from_package check levels


def test_from_package_default_is_structural_only():
    s = sp.csr_array((np.array([1.0, 2.0]), np.array([0, 7]), np.array([0, 1, 2])), shape=(2, 3))
    indices = s.indices.copy()
    t = Tensor.from_package(s)  # crd out of range: not looked at by default
    assert t.nse == 2
    with pytest.raises(ustc.StorageError, match=re.escape("crd[1]")):
        Tensor.from_package(s, validate=True)
    np.testing.assert_array_equal(s.indices, indices)


def test_from_package_wrong_length_pos_raises_without_validate():
    s = sp.csr_array((np.array([1.0, 2.0]), np.array([0, 1]), np.array([0, 1, 2])), shape=(2, 3))
    s.indptr = np.array([0, 1, 2, 2], dtype=np.int32)  # SciPy does not re-check on assignment
    with pytest.raises(ustc.StorageError, match="pos"):
        Tensor.from_package(s)


def test_from_package_torch_structural_and_full():
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        short = torch.sparse_csr_tensor(torch.tensor([0, 1, 2]), torch.tensor([0, 1]), torch.tensor([1.0, 2.0]),
                                        (3, 3))
        with pytest.raises(ustc.StorageError, match="level 1"):
            Tensor.from_package(short)
        oob = torch.sparse_csr_tensor(torch.tensor([0, 1, 2]), torch.tensor([0, 7]), torch.tensor([1.0, 2.0]),
                                      (2, 3))
        cols = oob.col_indices().clone()
        assert Tensor.from_package(oob).nse == 2
        with pytest.raises(ustc.StorageError, match=re.escape("crd[1]")):
            Tensor.from_package(oob, validate=True)
        assert torch.equal(oob.col_indices(), cols)


def test_from_package_validate_on_tensor():
    t = build(F.CSR, (3, 4), {(1, "pos"): [0, 2, 3, 5], (1, "crd"): [0, 2, 1, 0, 9]}, [1, 2, 3, 4, 5])
    assert Tensor.from_package(t) is t
    with pytest.raises(ustc.StorageError, match=re.escape("crd[4]")):
        Tensor.from_package(t, validate=True)


# --------------------------------------------------------------------------- inputs never mutated


@pytest.mark.parametrize("fmt", [F.CSR, F.CSC, F.COO(), F.DIAI, F.DELTA(2), F.DELTA(2, True), F.BSR(2, 2),
                                 F.Structured(2, 4), LOOSE, F.DCSR], ids=lambda f: f.name or str(f))
def test_operations_do_not_mutate_inputs(fmt):
    rng = np.random.default_rng(0)
    x = np.where(rng.random((4, 8)) < 0.3, rng.integers(1, 9, (4, 8)), 0).astype(np.float64)
    x[:, 2::4] = 0  # at most 3 per block of 4 ... and 2:4 needs at most 2
    x[:, 3::4] = 0
    x0 = x.copy()
    t = Tensor.from_dense(x, fmt)
    np.testing.assert_array_equal(x, x0)
    snap = snapshot(t)
    t.validate()
    t.to_dense()
    t.entries()
    t.get_value(1, 1)
    repr(t)
    for target in (F.CSR, F.CSC, F.COO(), F.DIAJ, F.Dense(2)):
        t.convert(target)
    assert_unchanged(t, snap)
    r, c = np.nonzero(x)
    rr, cc, vv = r.copy(), c.copy(), x[r, c].copy()
    Tensor.from_coo((rr, cc), vv, x.shape, fmt)
    np.testing.assert_array_equal(rr, r)
    np.testing.assert_array_equal(cc, c)
    np.testing.assert_array_equal(vv, x[r, c])


def test_scipy_sources_not_mutated():
    rows = np.array([2, 0, 2, 1], dtype=np.int32)
    cols = np.array([1, 2, 1, 0], dtype=np.int32)
    data = np.array([1.0, 2.0, 3.0, 4.0])
    s = sp.coo_array((data, (rows, cols)), shape=(3, 3))
    copies = [a.copy() for a in (rows, cols, data)]
    t = Tensor.from_package(s, validate=True)
    t.convert(F.CSR)
    t.to_dense()
    t.convert(F.COO())
    for a, b in zip((rows, cols, data), copies):
        np.testing.assert_array_equal(a, b)
    assert not s.has_canonical_format
