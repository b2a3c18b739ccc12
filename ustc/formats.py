"""Named formats: the UST set, as constants and parameterised builders.

    >>> from ustc import formats
    >>> formats.CSR
    [i, j] -> (i: <LevelFormat.DENSE>, j: <LevelFormat.COMPRESSED>)
    >>> str(formats.BSR(2, 3))
    '(d0, d1) -> (d0 floordiv 2 : dense, d1 floordiv 3 : compressed, d0 mod 2 : dense, d1 mod 3 : dense)'

``COO``, ``Dense`` and ``CSF`` are formats of their default rank (2, 2 and 3)
that can also be called for another rank: ``formats.COO`` is 2-D COO and
``formats.COO(3)`` is 3-D COO.

``TensorFormat.parse("CSR")`` and ``parse("BSR(2, 3)")`` resolve names
(case-insensitively) through ``by_name``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .errors import FormatError, ShapeError
from .format.expr import Dimension
from .format.ir import TensorFormat
from .format.levels import PACKED, LevelFormat, LevelProperty
from .format.levels.delta_width import choose_width, gap_histogram

D, S, C = LevelFormat.DENSE, LevelFormat.SINGLETON, LevelFormat.COMPRESSED
i, j, b = Dimension("i"), Dimension("j"), Dimension("b")


def dimensions(rank: int) -> list[Dimension]:
    """``rank`` dimensions named i, j, k, ... (d0, d1, ... beyond eight)."""
    letters = "ijklmnop"
    return [Dimension(letters[r] if rank <= len(letters) else f"d{r}") for r in range(rank)]


MAX_RANK = 64  # NumPy's limit on array dimensions; also keeps "CSF(99999999999)" from exhausting memory


def _rank(rank, least: int = 1) -> int:
    if isinstance(rank, bool) or not isinstance(rank, int) or not least <= rank <= MAX_RANK:
        raise FormatError(f"rank must be an integer in [{least}, {MAX_RANK}], got {rank!r}")
    return rank


class FormatFamily(TensorFormat):
    """A format of a family's default rank that, called with a rank, builds that member
    (``COO`` is 2-D COO, ``COO(3)`` 3-D COO). Equal to the plain format of the same levels."""

    def __call__(self, *args, **kwargs) -> TensorFormat:
        return self.__dict__["_build"](*args, **kwargs)

    def __reduce__(self):
        return (_family_member, (self.__dict__["_build"].__name__,))


def _family(build: Callable[..., TensorFormat]) -> FormatFamily:
    fmt = build()
    family = FormatFamily(fmt.dims, fmt.levels, fmt.pos_width, fmt.crd_width, name=fmt.name)
    family.__dict__["_build"] = build
    return family


def _family_member(name: str) -> FormatFamily:
    return globals()[name]


def _dense(rank: int = 2) -> TensorFormat:
    """All levels dense, in dimension order (row-major)."""
    dims = dimensions(_rank(rank))
    return TensorFormat(dims, {d: D for d in dims}, name=f"Dense({rank})")


def _coo(rank: int = 2) -> TensorFormat:
    """``compressed(nonunique)`` then ``singleton(nonunique)`` ... ``singleton``."""
    dims = dimensions(_rank(rank, 2))
    levels = {dims[0]: (C, LevelProperty.NONUNIQUE)}
    levels.update({d: (S, LevelProperty.NONUNIQUE) for d in dims[1:-1]})
    levels[dims[-1]] = S
    return TensorFormat(dims, levels, name="COO" if rank == 2 else f"COO({rank})")


def _csf(rank: int = 3) -> TensorFormat:
    """Compressed sparse fiber: every level compressed, in dimension order."""
    dims = dimensions(_rank(rank))
    return TensorFormat(dims, {d: C for d in dims}, name=f"CSF({rank})")


_dense.__name__, _coo.__name__, _csf.__name__ = "Dense", "COO", "CSF"
Dense = _family(_dense)
COO = _family(_coo)
CSF = _family(_csf)


def BSR(bm: int, bn: int) -> TensorFormat:
    """Block sparse rows with bm x bn blocks, stored row-major inside a block."""
    return TensorFormat([i, j], {i // bm: D, j // bn: C, i % bm: D, j % bn: D}, name=f"BSR({bm}, {bn})")


def BSC(bm: int, bn: int) -> TensorFormat:
    """Block sparse columns with bm x bn blocks, stored row-major inside a block."""
    return TensorFormat([i, j], {j // bn: D, i // bm: C, i % bm: D, j % bn: D}, name=f"BSC({bm}, {bn})")


def DELTA(bits: int, packed: bool = False) -> TensorFormat:
    """Rows of b-bit coordinate gaps (``packed``: MACKO's bit-packed gaps)."""
    if not isinstance(packed, bool):
        raise FormatError(f"DELTA(b[, packed]): the second argument must be 'packed', got {packed!r}")
    spec = (LevelFormat.DELTA, bits, PACKED) if packed else (LevelFormat.DELTA, bits)
    name = f"DELTA({bits}, packed)" if packed else f"DELTA({bits})"
    return TensorFormat([i, j], {i: D, j: spec}, name=name)


def best_delta(matrix, packed: bool = True, value_bytes: int | None = None) -> TensorFormat:
    """``DELTA(b, packed)`` with the gap width ``b`` that stores ``matrix`` in the fewest bytes
    (gaps + values + the padding entries bridging gaps wider than ``2**b - 1``), chosen from
    the histogram of its column gaps (``ustc.format.levels.delta_width``); ``Tensor.convert``
    or ``Tensor.from_dense`` with it then stores that many entries.

    ``matrix``: a 2-D ``ustc.Tensor``, SciPy sparse matrix or array, or NumPy / torch dense
    array; only its nonzeros count. ``value_bytes`` defaults to its dtype's item size
    (2 for float16). ``packed=False`` chooses among the unpacked widths 1..32.
    :func:`delta_cost` gives the bytes too.
    """
    return DELTA(delta_cost(matrix, packed, value_bytes).bits, packed)


def delta_cost(matrix, packed: bool = True, value_bytes: int | None = None):
    """What :func:`best_delta`'s format would store for ``matrix`` (same arguments), counted
    without converting: a ``WidthCost`` with ``bits``, ``entries`` (nonzeros + ``padding``)
    and ``bytes`` (gaps and values; the ``rows + 1`` row pointers come on top), so a caller
    can set delta against other formats' bytes (CSR, n:m) before building any."""
    if not isinstance(packed, bool):
        raise FormatError(f"best_delta: packed must be True or False, got {packed!r}")
    rows, cols, item = _nonzero_coordinates(matrix)
    vbytes = item if value_bytes is None else value_bytes
    try:
        return choose_width(gap_histogram(rows, cols), vbytes, packed)
    except ValueError as exc:
        raise FormatError(f"best_delta: {exc}") from None


def _nonzero_coordinates(matrix):
    """``(rows, columns, value item size)`` of the nonzeros of a 2-D matrix, in row-major order."""
    if not hasattr(matrix, "shape"):  # nested lists
        matrix = np.asarray(matrix)
    shape = tuple(matrix.shape)
    if len(shape) != 2:
        raise ShapeError(f"best_delta needs a 2-D matrix, got shape {shape} ({type(matrix).__name__})")
    if callable(getattr(matrix, "entries", None)) and hasattr(matrix, "format"):
        # a ustc.Tensor: its stored entries, zeros and duplicates kept, in any order
        (rows, cols), values = matrix.entries()
        keep = np.asarray(values) != 0
        rows, cols = np.asarray(rows, np.int64)[keep], np.asarray(cols, np.int64)[keep]
        order = np.lexsort((cols, rows))
        rows, cols = rows[order], cols[order]
        new = np.ones(len(rows), bool)
        new[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
        return rows[new], cols[new], np.dtype(matrix.dtype).itemsize
    if hasattr(matrix, "tocsr"):  # SciPy sparse
        csr = matrix.tocsr(copy=True)
        csr.sum_duplicates()
        csr.eliminate_zeros()
        rows = np.repeat(np.arange(shape[0], dtype=np.int64), np.diff(csr.indptr))
        return rows, csr.indices.astype(np.int64), csr.dtype.itemsize
    if hasattr(matrix, "detach"):  # torch
        item = matrix.element_size()
        mask = (matrix.detach().to_dense() != 0).cpu().numpy()
    else:
        array = np.asarray(matrix)
        item, mask = array.dtype.itemsize, array != 0
    rows, cols = np.nonzero(mask)
    return rows.astype(np.int64), cols.astype(np.int64), item


def Structured(n: int, m: int) -> TensorFormat:
    """n:m structured sparsity along rows (2:4 is ``Structured(2, 4)``)."""
    return TensorFormat([i, j], {i: D, j // m: D, j % m: (LevelFormat.STRUCTURED, n, m)},
                        name=f"Structured({n}, {m})")


CSR = TensorFormat([i, j], {i: D, j: C}, name="CSR")
CSC = TensorFormat([i, j], {j: D, i: C}, name="CSC")
DCSR = TensorFormat([i, j], {i: C, j: C}, name="DCSR")
DCSC = TensorFormat([i, j], {j: C, i: C}, name="DCSC")
CROW = TensorFormat([i, j], {i: C, j: D}, name="CROW")
CCOL = TensorFormat([i, j], {j: C, i: D}, name="CCOL")
DIAI = TensorFormat([i, j], {j - i: C, i: LevelFormat.RANGE}, name="DIAI")
DIAJ = TensorFormat([i, j], {j - i: C, j: LevelFormat.RANGE}, name="DIAJ")
SkewDIAI = TensorFormat([i, j], {i + j: C, i: LevelFormat.RANGE}, name="SkewDIAI")
SkewDIAJ = TensorFormat([i, j], {i + j: C, j: LevelFormat.RANGE}, name="SkewDIAJ")
BatchedCSR = TensorFormat([b, i, j], {b: LevelFormat.BATCH, i: D, j: C}, name="BatchedCSR")


@dataclass(frozen=True)
class NamedFormat:
    name: str
    params: str
    build: Callable[..., TensorFormat]
    example: tuple = ()

    def format(self) -> TensorFormat:
        return self.build(*self.example)


def _constant(fmt: TensorFormat) -> Callable[[], TensorFormat]:
    return lambda: fmt


NAMED: tuple[NamedFormat, ...] = (
    NamedFormat("Dense", "(rank=2)", Dense, (2,)),
    NamedFormat("COO", "(rank=2)", COO, (2,)),
    NamedFormat("CSR", "", _constant(CSR)),
    NamedFormat("CSC", "", _constant(CSC)),
    NamedFormat("DCSR", "", _constant(DCSR)),
    NamedFormat("DCSC", "", _constant(DCSC)),
    NamedFormat("CROW", "", _constant(CROW)),
    NamedFormat("CCOL", "", _constant(CCOL)),
    NamedFormat("DIAI", "", _constant(DIAI)),
    NamedFormat("DIAJ", "", _constant(DIAJ)),
    NamedFormat("SkewDIAI", "", _constant(SkewDIAI)),
    NamedFormat("SkewDIAJ", "", _constant(SkewDIAJ)),
    NamedFormat("BSR", "(bm, bn)", BSR, (2, 2)),
    NamedFormat("BSC", "(bm, bn)", BSC, (2, 2)),
    NamedFormat("DELTA", "(b[, packed])", DELTA, (4,)),
    NamedFormat("Structured", "(n, m)", Structured, (2, 4)),
    NamedFormat("CSF", "(rank=3)", CSF, (3,)),
    NamedFormat("BatchedCSR", "", _constant(BatchedCSR)),
)
_BY_NAME = {nf.name.lower(): nf for nf in NAMED}


def names() -> tuple[str, ...]:
    return tuple(nf.name for nf in NAMED)


def by_name(name: str, *args) -> TensorFormat:
    """The named format ``name`` built with ``args`` (``by_name("BSR", 2, 2)``)."""
    nf = _BY_NAME.get(name.lower())
    if nf is None:
        raise FormatError(f"unknown format name {name!r}")
    if nf.name == "DELTA" and len(args) == 2 and args[1] == PACKED:
        args = (args[0], True)
    if any(isinstance(a, str) for a in args):
        raise FormatError(f"{nf.name}{nf.params} takes integers, got {args!r}")
    try:
        return nf.build(*args)
    except TypeError:
        raise FormatError(f"{nf.name} takes {nf.params or 'no parameters'}, got {len(args)} argument(s)") from None


def table() -> list[tuple[str, str, str]]:
    """Rows ``(name + params, example, DSL text)`` for ``ustc formats``."""
    rows = []
    for nf in NAMED:
        fmt = nf.format()
        example = f"{nf.name}({', '.join(map(str, nf.example))})" if nf.example else nf.name
        rows.append((nf.name + nf.params, example, fmt.text))
    return rows
