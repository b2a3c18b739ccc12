# golden file: y[i] += A[i, j] * x[j]

import numpy as np
from numba import config, cuda
from ustc.codegen.cuda_loads import ldg, ldg2, ldg4, ldg8, element_address


def blocks_for(work, threads, limit):
    """Blocks for `work` grid-stride iterations: at least 1, at most `limit`."""
    return max(1, min(limit, (work + threads - 1) // threads))


def bounds(threads, blocks):
    """cuda.jit launch bounds: at most `threads` a block, registers left for `blocks` blocks
    a multiprocessor (none in the CUDA simulator, whose cuda.jit takes none)."""
    return {} if config.ENABLE_CUDASIM else {"launch_bounds": (threads, blocks)}


# schedule: thread_per_row, 256 threads/block — no shared row reduction, atomic updates
# promises: at most 128 registers a thread (2 blocks of 256 threads a multiprocessor), no warp shuffles, atomics, read-only loads
@cuda.jit(cache=True, **bounds(256, 2))
def kernel_0(y, A_lvl1_pos, A_lvl1_crd, A_vals, x, n_j):
    """y[i] += A[i, j] * x[j]"""
    # iterations may update the same output elements: atomic adds
    for j in range(cuda.grid(1), n_j, cuda.gridsize(1)):
        for A_p1 in range(np.intp(ldg(A_lvl1_pos, np.uintp(j))), np.intp(ldg(A_lvl1_pos, np.uintp(j + 1)))):
            i = np.intp(ldg(A_lvl1_crd, np.uintp(A_p1)))
            cuda.atomic.add(y, np.uintp(i), ldg(A_vals, np.uintp(A_p1)) * ldg(x, np.uintp(j)))


def launch_kernel_0(y, A_lvl1_pos, A_lvl1_crd, A_vals, x, n_j, stream=0):
    """Launch kernel_0 on `stream` (thread_per_row)."""
    blocks = blocks_for(n_j, 256, 4096)
    kernel_0[blocks, 256, stream](y, A_lvl1_pos, A_lvl1_crd, A_vals, x, n_j)


PLAN = [{'function': 'kernel_0', 'params': [['array', 'y'], ['pos', 'A', 1], ['crd', 'A', 1], ['vals', 'A'], ['array', 'x'], ['extent', 'j']], 'convert': {}, 'alias': {}, 'order': ['j', 'i'], 'sparse_output': False, 'rows': None, 'statement': 'y[i] += A[i, j] * x[j]', 'accumulate': True, 'overwrites': False, 'writer': 0, 'workspace': None}]
