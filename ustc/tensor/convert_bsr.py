"""``Tensor.convert`` from a row-major CSR or canonical COO into BSR(r, c) (:mod:`ustc.kernels._convert_bsr`).

Two parallel passes over the CSR (count each block row's blocks, then write them) and a parallel
prefix between them; the arrays allocated are the result's own, each touched once, and for a
power-of-two block width one stamp a block column a thread. Replaces the generated writer for the
pair (three walks of the source, a marker array a chunk and pass); numbers in the commit log.
"""

from __future__ import annotations

import numpy as np

from ..format.ir import TensorFormat
from ..kernels import _convert_bsr
from .dtypes import buffer_dtypes, narrow
from .fastpaths import COMPRESSED, PARALLEL_TRANSPOSE, compiled_dtype, family
from .fastpaths_rows import BLOCKS_PER_THREAD, source_kind

CHUNKS_PER_THREAD = 4  # block-row chunks a thread (rows vary in length)


def bsr_from_csr(t, fmt: TensorFormat):
    """``t`` (a host CSR, rows major, its columns promised ordered and unique, or a canonical
    row-major COO) in the BSR(r, c) ``fmt``, equal buffer for buffer to the generated writer's
    result (explicit zeros dropped; a block of zeros only not stored; block columns ascending);
    None where this does not apply (another source or target, a dtype the kernels do not compile;
    a COO source where ``c`` is not a power of two or the stamps would outweigh the entries)."""
    fam = family(t.format)
    if fam is None or fam.major != 0 or t.device != "cpu" or t.ndim != 2 or not compiled_dtype(t.dtype) \
            or (fam.kind == "csr" and t.format.levels[1].type != COMPRESSED):
        return None
    level_shape = fmt.level_shape(t.shape)
    if source_kind(fmt, level_shape) != "bsr":
        return None
    from . import kernels

    b = t._buffers
    if fam.kind == "csr":
        major, crd = b[(1, "pos")], b[(1, "crd")]
        nnz = int(major[-1])
    else:
        pos0 = b[(0, "pos")]
        if int(pos0[0]) != 0:
            return None
        nnz = int(pos0[1])
        major, crd = b[(0, "crd")][:nnz], b[(1, "crd")][:nnz]
    (nbr, ncb, r, c), nrows = level_shape, t.shape[0]
    shift = c.bit_length() - 1 if c & (c - 1) == 0 else -1
    threads = kernels.threads() if nnz >= PARALLEL_TRANSPOSE else 1
    stamps = None  # a stamp a block column a thread, where they cost at most an index an entry
    if shift >= 0 and threads * ncb <= nnz:
        stamps = np.empty((threads, ncb), dtype=np.int32 if max(nnz, nbr) < 2 ** 31 - 1 else np.int64)
    elif fam.kind == "coo":
        return None
    values, K, chunks = t._values[:nnz], _convert_bsr, threads * CHUNKS_PER_THREAD

    def count(counts, drop):
        if fam.kind == "coo":
            K.coo_block_counts(major, crd, values, r, shift, counts, stamps, drop)
        elif stamps is not None:
            K.block_counts(major, crd, values, r, shift, nrows, counts, stamps, drop)
        else:
            K.block_counts_merged(major, crd, values, r, c, nrows, counts, chunks, drop)

    def fill(counts, crd_out, values_out, drop):
        if fam.kind == "coo":
            return K.coo_block_fill_stamped(major, crd, values, r, shift, counts, crd_out, values_out, stamps, drop)
        if stamps is not None:
            return K.block_fill_stamped(major, crd, values, r, shift, nrows, counts, crd_out, values_out, stamps, drop)
        return K.block_fill(major, crd, values, r, c, shift, nrows, counts, crd_out, values_out, chunks, drop)

    return _written(t, fmt, level_shape, nnz, count, fill, kernels)


def _written(t, fmt, level_shape, nnz: int, count, fill, kernels):
    """The BSR tensor: ``count`` each block row's blocks, a parallel prefix, ``fill`` them; run
    again dropping zeros where the fill met one (the count read no values)."""
    from .tensor import Tensor

    nbr, r, c = level_shape[0], level_shape[2], level_shape[3]
    origins = (0,) * fmt.nlevels
    dtypes = buffer_dtypes(fmt, level_shape, origins, nnz)  # nnz bounds the block count
    for drop in (False, True):
        counts = np.empty(nbr + 1, dtype=dtypes[(1, "pos")])
        counts[0] = 0
        count(counts, drop)
        nblocks = max(1, min(nbr + 1, kernels.threads() * BLOCKS_PER_THREAD))
        total = int(kernels.prefix_in_place(counts, np.arange(nblocks + 1, dtype=np.int64) * (nbr + 1) // nblocks))
        crd_out = np.empty(total, dtype=dtypes[(1, "crd")])
        values_out = np.empty(total * r * c, dtype=t.dtype)
        zeros = fill(counts, crd_out, values_out, drop)
        if drop or not zeros:
            break
        del crd_out, values_out  # a block may hold explicit zeros only: counted again, dropping them
    buffers = narrow(fmt, {(1, "pos"): counts, (1, "crd"): crd_out}, level_shape, origins)
    return Tensor(fmt, t.shape, buffers, values_out, package=t.package)
