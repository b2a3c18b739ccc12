"""``Tensor.convert`` from a row-major CSR into BSR(r, c) (:mod:`ustc.kernels._convert_bsr`).

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
    """``t`` (a host CSR, rows major, its columns promised ordered and unique) in the BSR(r, c)
    ``fmt``, equal buffer for buffer to the generated writer's result (explicit zeros dropped;
    a block of zeros only not stored; block columns ascending); None where this does not apply
    (another source or target, a dtype the kernels do not compile)."""
    fam = family(t.format)
    if fam is None or fam.kind != "csr" or fam.major != 0 or t.format.levels[1].type != COMPRESSED \
            or t.device != "cpu" or t.ndim != 2 or not compiled_dtype(t.dtype):
        return None
    level_shape = fmt.level_shape(t.shape)
    if source_kind(fmt, level_shape) != "bsr":
        return None
    from . import kernels
    from .tensor import Tensor

    (nrows, _), (nbr, _, r, c) = t.shape, level_shape
    pos, crd = t._buffers[(1, "pos")], t._buffers[(1, "crd")]
    nnz = int(pos[-1]) if len(pos) else 0
    values = t._values[:nnz]
    origins = (0,) * fmt.nlevels
    dtypes = buffer_dtypes(fmt, level_shape, origins, nnz)  # nnz bounds the block count
    shift = c.bit_length() - 1 if c & (c - 1) == 0 else -1
    threads = kernels.threads() if nnz >= PARALLEL_TRANSPOSE else 1
    chunks = threads * CHUNKS_PER_THREAD
    stamps = None  # a stamp a block column a thread, where they cost at most an index an entry
    if shift >= 0 and threads * level_shape[1] <= nnz:
        stamps = np.empty((threads, level_shape[1]), dtype=np.int32 if max(nnz, nbr) < 2 ** 31 - 1 else np.int64)
    for drop in (False, True):  # first as if no entry were zero: the count then reads no values
        counts = np.empty(nbr + 1, dtype=dtypes[(1, "pos")])
        counts[0] = 0
        if stamps is not None:
            _convert_bsr.block_counts(pos, crd, values, r, shift, nrows, counts, stamps, drop)
        else:
            _convert_bsr.block_counts_merged(pos, crd, values, r, c, nrows, counts, chunks, drop)
        nblocks = max(1, min(nbr + 1, kernels.threads() * BLOCKS_PER_THREAD))
        total = int(kernels.prefix_in_place(counts, np.arange(nblocks + 1, dtype=np.int64) * (nbr + 1) // nblocks))
        crd_out = np.empty(total, dtype=dtypes[(1, "crd")])
        values_out = np.empty(total * r * c, dtype=values.dtype)
        if stamps is not None:
            zeros = _convert_bsr.block_fill_stamped(pos, crd, values, r, shift, nrows, counts, crd_out, values_out,
                                                    stamps, drop)
        else:
            zeros = _convert_bsr.block_fill(pos, crd, values, r, c, shift, nrows, counts, crd_out, values_out,
                                            chunks, drop)
        if drop or not zeros:
            break
        del crd_out, values_out  # a block may hold explicit zeros only: counted again, dropping them
    buffers = narrow(fmt, {(1, "pos"): counts, (1, "crd"): crd_out}, level_shape, origins)
    return Tensor(fmt, t.shape, buffers, values_out, package=t.package)
