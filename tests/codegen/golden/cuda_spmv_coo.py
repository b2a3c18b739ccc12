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
def kernel_0(y, A_lvl0_pos, A_lvl0_crd, A_lvl1_crd, A_vals, x):
    """y[i] += A[i, j] * x[j]"""
    A_p0_lo = np.intp(ldg(A_lvl0_pos, 0))
    A_p0_hi = np.intp(ldg(A_lvl0_pos, 1))
    for A_chunk0 in range(cuda.grid(1), (A_p0_hi - A_p0_lo + 31) // 32, cuda.gridsize(1)):
        A_p0_a = min(A_p0_lo + A_chunk0 * 32, A_p0_hi)
        while A_p0_a > A_p0_lo and A_p0_a < A_p0_hi and np.intp(ldg(A_lvl0_crd, np.uintp(A_p0_a))) == np.intp(ldg(A_lvl0_crd, np.uintp(A_p0_a - 1))):
            A_p0_a += 1
        A_p0_b = min(A_p0_lo + (A_chunk0 + 1) * 32, A_p0_hi)
        while A_p0_b > A_p0_lo and A_p0_b < A_p0_hi and np.intp(ldg(A_lvl0_crd, np.uintp(A_p0_b))) == np.intp(ldg(A_lvl0_crd, np.uintp(A_p0_b - 1))):
            A_p0_b += 1
        for A_p0 in range(A_p0_a, A_p0_b):
            i = np.intp(ldg(A_lvl0_crd, np.uintp(A_p0)))
            acc = 0.0
            A_p1 = A_p0
            j = np.intp(ldg(A_lvl1_crd, np.uintp(A_p1)))
            acc += ldg(A_vals, np.uintp(A_p1)) * ldg(x, np.uintp(j))
            y[np.uintp(i)] += acc


def launch_kernel_0(y, A_lvl0_pos, A_lvl0_crd, A_lvl1_crd, A_vals, x, stream=0):
    """Launch kernel_0 on `stream` (thread_per_row)."""
    kernel_0[4096, 256, stream](y, A_lvl0_pos, A_lvl0_crd, A_lvl1_crd, A_vals, x)


PLAN = [{'function': 'kernel_0', 'params': [['array', 'y'], ['pos', 'A', 0], ['crd', 'A', 0], ['crd', 'A', 1], ['vals', 'A'], ['array', 'x']], 'convert': {}, 'alias': {}, 'order': ['i', 'j'], 'sparse_output': False, 'rows': None, 'statement': 'y[i] += A[i, j] * x[j]', 'accumulate': True, 'overwrites': False, 'writer': 0, 'workspace': None}]
