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


# schedule: thread_per_row, 256 threads/block — no shared row reduction
# promises: at most 128 registers a thread (2 blocks of 256 threads a multiprocessor), no warp shuffles, no atomics, read-only loads
@cuda.jit(cache=True, **bounds(256, 2))
def kernel_0(y, A_lvl0_pos, A_lvl0_crd, A_lvl1_size, A_vals, x, n_i, n_j):
    """y[i] += A[i, j] * x[j]"""
    for i_tile in range(cuda.grid(1), n_i, cuda.gridsize(1)):
        i_tlo = i_tile
        i_thi = min(i_tlo + 1, n_i)
        for A_p0 in range(np.intp(ldg(A_lvl0_pos, 0)), np.intp(ldg(A_lvl0_pos, 1))):
            v_j_minus_i = np.intp(ldg(A_lvl0_crd, np.uintp(A_p0)))
            for i in range(max(i_tlo, max(0, -v_j_minus_i)), min(i_thi, min(n_i, n_j - v_j_minus_i))):
                j = v_j_minus_i + i
                A_p1 = A_p0 * A_lvl1_size + i
                y[np.uintp(i)] += ldg(A_vals, np.uintp(A_p1)) * ldg(x, np.uintp(j))


def launch_kernel_0(y, A_lvl0_pos, A_lvl0_crd, A_lvl1_size, A_vals, x, n_i, n_j, stream=0):
    """Launch kernel_0 on `stream` (thread_per_row)."""
    blocks = blocks_for(n_i, 256, 4096)
    kernel_0[blocks, 256, stream](y, A_lvl0_pos, A_lvl0_crd, A_lvl1_size, A_vals, x, n_i, n_j)


PLAN = [{'function': 'kernel_0', 'params': [['array', 'y'], ['pos', 'A', 0], ['crd', 'A', 0], ['size', 'A', 1], ['vals', 'A'], ['array', 'x'], ['extent', 'i'], ['extent', 'j']], 'convert': {}, 'alias': {}, 'order': ['v_j_minus_i', 'i'], 'sparse_output': False, 'rows': None, 'statement': 'y[i] += A[i, j] * x[j]', 'accumulate': True, 'overwrites': False, 'writer': 0, 'workspace': None}]
