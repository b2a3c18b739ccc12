"""``NamedFormats``: nvmath-python's predefined formats and format builders, by its names.

The dimensions are ``i, j, k, ...`` (``batch`` for the batch dimension of the
``Batched*`` formats). Where a name means something else in :mod:`ustc.formats`,
the nvmath-python meaning wins here:

* ``BatchedCSR`` is ``batch : dense, i : dense, j : compressed``: a CSR matrix
  per sample, each with its own number of stored entries. ``ustc.formats.BatchedCSR``
  is the uniform batch (``batch : batch``, the same count in every sample,
  PyTorch's batched CSR), which nvmath-python spells ``CSRd(batch_dim=1)``.
* ``BSRRight((m, n))`` / ``BSCRight`` store each block row-major, the ``Left``
  variants column-major; ``ustc.formats.BSR(m, n)`` equals ``BSRRight((m, n))``.
* ``DELTA(b)`` is ``ustc.formats.DELTA(b)``; ``Structured(n, m)`` is
  ``ustc.formats.Structured(n, m)``.
"""

from __future__ import annotations

from .formats import Dimension, LevelFormat, LevelProperty, TensorFormat

__all__ = ["NamedFormats", "known_name"]

D, B, C, S, R = (LevelFormat.DENSE, LevelFormat.BATCH, LevelFormat.COMPRESSED, LevelFormat.SINGLETON,
                 LevelFormat.RANGE)


def _dims(rank: int) -> list[Dimension]:
    return [Dimension(dimension_name=chr(ord("i") + d)) for d in range(rank)]


def _suffix(batch_dim: int, dense_dim: int) -> str:
    return (f"-b{batch_dim}" if batch_dim else "") + (f"-d{dense_dim}" if dense_dim else "")


def _blocked(dims, outer: tuple[int, int], blocksize, inner_first: int, compressed_level: str = "col"):
    """Levels of a 2-D blocked format over ``dims[outer[0]]`` (rows) and ``dims[outer[1]]`` (cols)."""
    m, n = blocksize
    r, c = dims[outer[0]], dims[outer[1]]
    block = {r // m: D, c // n: C} if compressed_level == "col" else {c // n: D, r // m: C}
    inside = {r % m: D, c % n: D} if inner_first == 0 else {c % n: D, r % m: D}
    return {**block, **inside}


class NamedFormats:
    """Predefined formats (class attributes) and builders (static methods)."""

    i, j, k = _dims(3)
    b = Dimension(dimension_name="batch")

    Scalar = TensorFormat([], {}, name="Scalar")
    DenseVector = TensorFormat([i], {i: D}, name="DenseVector")
    SparseVector = TensorFormat([i], {i: C}, name="SparseVector")
    DenseMatrixRight = TensorFormat([i, j], {i: D, j: D}, name="DenseMatrixRight")
    DenseMatrixLeft = TensorFormat([i, j], {j: D, i: D}, name="DenseMatrixLeft")

    COO = TensorFormat([i, j], {i: (C, LevelProperty.NONUNIQUE), j: S}, name="COO")
    CSR = TensorFormat([i, j], {i: D, j: C}, name="CSR")
    CSC = TensorFormat([i, j], {j: D, i: C}, name="CSC")
    DCSR = TensorFormat([i, j], {i: C, j: C}, name="DCSR")
    DCSC = TensorFormat([i, j], {j: C, i: C}, name="DCSC")
    CROW = TensorFormat([i, j], {i: C, j: D}, name="CROW")
    CCOL = TensorFormat([i, j], {j: C, i: D}, name="CCOL")

    DIAI = TensorFormat([i, j], {j - i: C, i: R}, name="DIAI")
    DIAJ = TensorFormat([i, j], {j - i: C, j: R}, name="DIAJ")
    SkewDIAI = TensorFormat([i, j], {i + j: C, i: R}, name="SkewDIAI")
    SkewDIAJ = TensorFormat([i, j], {i + j: C, j: R}, name="SkewDIAJ")

    BatchedCSR = TensorFormat([b, i, j], {b: D, i: D, j: C}, name="BatchedCSR")
    BatchedDIAINonUniform = TensorFormat([b, i, j], {b: D, j - i: C, i: R}, name="BatchedDIAINonUniform")
    BatchedDIAIUniform = TensorFormat([b, i, j], {j - i: C, b: D, i: R}, name="BatchedDIAIUniform")

    # -- builders ---------------------------------------------------------------------------
    @staticmethod
    def BlockVector(blocksize):
        """A vector of ``blocksize`` blocks, the blocks stored compressed."""
        i = NamedFormats.i
        return TensorFormat([i], {i // blocksize: C, i % blocksize: D}, name=f"BlockVector{blocksize}")

    @staticmethod
    def BSRRight(blocksize):
        """Block sparse rows, ``blocksize = (m, n)``, each block stored row-major."""
        m, n = blocksize
        dims = [NamedFormats.i, NamedFormats.j]
        return TensorFormat(dims, _blocked(dims, (0, 1), blocksize, 0), name=f"BSRRight{m}x{n}")

    @staticmethod
    def BSRLeft(blocksize):
        """Block sparse rows, ``blocksize = (m, n)``, each block stored column-major."""
        m, n = blocksize
        dims = [NamedFormats.i, NamedFormats.j]
        return TensorFormat(dims, _blocked(dims, (0, 1), blocksize, 1), name=f"BSRLeft{m}x{n}")

    @staticmethod
    def BSCRight(blocksize):
        """Block sparse columns, ``blocksize = (m, n)``, each block stored row-major."""
        m, n = blocksize
        dims = [NamedFormats.i, NamedFormats.j]
        return TensorFormat(dims, _blocked(dims, (0, 1), blocksize, 0, "row"), name=f"BSCRow{m}x{n}")

    @staticmethod
    def BSCLeft(blocksize):
        """Block sparse columns, ``blocksize = (m, n)``, each block stored column-major."""
        m, n = blocksize
        dims = [NamedFormats.i, NamedFormats.j]
        return TensorFormat(dims, _blocked(dims, (0, 1), blocksize, 1, "row"), name=f"BSCCol{m}x{n}")

    @staticmethod
    def DELTA(delta):
        """Rows of ``delta``-bit coordinate gaps (``ustc.formats.DELTA``)."""
        if not isinstance(delta, int) or delta <= 0:
            raise ValueError(f"DELTA needs a positive number of bits, got {delta!r}")
        i, j = NamedFormats.i, NamedFormats.j
        return TensorFormat([i, j], {i: D, j: (LevelFormat.DELTA, delta)}, name=f"Delta{delta}")

    @staticmethod
    def Structured(N, M):
        """``N:M`` structured sparsity along rows (at most N stored in every M columns)."""
        if not (isinstance(N, int) and isinstance(M, int) and 0 < N <= M):
            raise ValueError(f"Structured(N, M) needs 0 < N <= M, got N={N!r}, M={M!r}")
        i, j = NamedFormats.i, NamedFormats.j
        return TensorFormat([i, j], {i: D, j // M: D, j % M: (LevelFormat.STRUCTURED, N)}, name=f"Structured{N}:{M}")

    @staticmethod
    def BSR3(blocksize):
        """3-D blocks ``(m, n, o)``: dense over the first block coordinate, compressed over the others."""
        m, n, o = blocksize
        i, j, k = NamedFormats.i, NamedFormats.j, NamedFormats.k
        return TensorFormat([i, j, k], {i // m: D, j // n: C, k // o: C, i % m: D, j % n: D, k % o: D},
                            name=f"BSR3{m}x{n}x{o}")

    @staticmethod
    def DensedRight(dim):
        """A dense ``dim``-D tensor stored row-major (last dimension fastest)."""
        dims = _dims(dim)
        return TensorFormat(dims, {d: D for d in dims}, name=f"Dense{dim}Right")

    @staticmethod
    def DensedLeft(dim):
        """A dense ``dim``-D tensor stored column-major (first dimension fastest)."""
        dims = _dims(dim)
        return TensorFormat(dims, {d: D for d in reversed(dims)}, name=f"Dense{dim}Left")

    @staticmethod
    def COOd(sparse_dim, dense_dim=0):
        """COO over the first ``sparse_dim`` dimensions, then ``dense_dim`` dense ones, spelled as
        nvmath-python spells it (plain singletons); it equals ``ustc.formats.COO`` of that rank,
        whose middle singletons are nonunique (see :mod:`ustc.ust.formats`)."""
        dims = _dims(sparse_dim + dense_dim)
        levels = {dims[0]: C if sparse_dim == 1 else (C, LevelProperty.NONUNIQUE)}
        levels.update({d: S for d in dims[1:sparse_dim]})
        levels.update({d: D for d in dims[sparse_dim:]})
        rank = len(dims)
        name = ("COO" if rank == 2 else f"COO{rank}") if not dense_dim else None
        return TensorFormat(dims, levels, name=name)

    @staticmethod
    def CSRd(batch_dim=0, dense_dim=0):
        """CSR after ``batch_dim`` uniform batch levels, before ``dense_dim`` dense ones."""
        dims = _dims(batch_dim + 2 + dense_dim)
        levels = {d: B for d in dims[:batch_dim]}
        levels.update({dims[batch_dim]: D, dims[batch_dim + 1]: C})
        levels.update({d: D for d in dims[batch_dim + 2:]})
        return TensorFormat(dims, levels, name="CSR" + _suffix(batch_dim, dense_dim))

    @staticmethod
    def CSCd(batch_dim=0, dense_dim=0):
        """CSC after ``batch_dim`` uniform batch levels, before ``dense_dim`` dense ones."""
        dims = _dims(batch_dim + 2 + dense_dim)
        levels = {d: B for d in dims[:batch_dim]}
        levels.update({dims[batch_dim + 1]: D, dims[batch_dim]: C})
        levels.update({d: D for d in dims[batch_dim + 2:]})
        return TensorFormat(dims, levels, name="CSC" + _suffix(batch_dim, dense_dim))

    @staticmethod
    def BSRRightd(blocksize, batch_dim=0, dense_dim=0):
        """``BSRRight`` after ``batch_dim`` uniform batch levels, before ``dense_dim`` dense ones."""
        m, n = blocksize
        dims = _dims(batch_dim + 2 + dense_dim)
        levels = {d: B for d in dims[:batch_dim]}
        levels.update(_blocked(dims, (batch_dim, batch_dim + 1), blocksize, 0))
        levels.update({d: D for d in dims[batch_dim + 2:]})
        return TensorFormat(dims, levels, name=f"BSRRight{m}x{n}" + _suffix(batch_dim, dense_dim))

    @staticmethod
    def BSCRightd(blocksize, batch_dim=0, dense_dim=0):
        """``BSCRight`` after ``batch_dim`` uniform batch levels, before ``dense_dim`` dense ones."""
        m, n = blocksize
        dims = _dims(batch_dim + 2 + dense_dim)
        levels = {d: B for d in dims[:batch_dim]}
        levels.update(_blocked(dims, (batch_dim, batch_dim + 1), blocksize, 0, "row"))
        levels.update({d: D for d in dims[batch_dim + 2:]})
        return TensorFormat(dims, levels, name=f"BSCRight{m}x{n}" + _suffix(batch_dim, dense_dim))

    @staticmethod
    def CSFd(dim):
        """Compressed sparse fiber: ``dim`` compressed levels in dimension order."""
        dims = _dims(dim)
        return TensorFormat(dims, {d: C for d in dims}, name=f"CSF{dim}")


_KNOWN: dict | None = None


def known_name(fmt) -> str | None:
    """The name of the predefined (non-builder) format equal to the ustc format ``fmt``, if any."""
    global _KNOWN
    if _KNOWN is None:
        _KNOWN = {}
        for value in vars(NamedFormats).values():
            if isinstance(value, TensorFormat):
                _KNOWN.setdefault(value.ustc, value.name)
    return _KNOWN.get(fmt)
