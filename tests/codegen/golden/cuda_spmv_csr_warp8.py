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


# schedule: warp_per_row(width=8), 256 threads/block — requested
# promises: at most 128 registers a thread (2 blocks of 256 threads a multiprocessor), warp shuffles, no atomics, read-only loads
@cuda.jit(cache=True, **bounds(256, 2))
def kernel_0(y, A_lvl1_pos, A_lvl1_crd, A_vals, x, n_i):
    """y[i] += A[i, j] * x[j]"""
    lane = cuda.threadIdx.x % 8  # 8 lanes per i
    group = cuda.threadIdx.x % 32 // 8  # 4 i per warp
    for i_base in range(cuda.grid(1) // 32 * 4, n_i, cuda.gridsize(1) // 32 * 4):
        i = i_base + group
        acc = 0.0
        if i < n_i:
            for A_p1 in range(np.intp(ldg(A_lvl1_pos, np.uintp(i))) + lane, np.intp(ldg(A_lvl1_pos, np.uintp(i + 1))), 8):
                j = np.intp(ldg(A_lvl1_crd, np.uintp(A_p1)))
                acc += ldg(A_vals, np.uintp(A_p1)) * ldg(x, np.uintp(j))
        acc += cuda.shfl_down_sync(0xFFFFFFFF, acc, 4)
        acc += cuda.shfl_down_sync(0xFFFFFFFF, acc, 2)
        acc += cuda.shfl_down_sync(0xFFFFFFFF, acc, 1)
        if lane == 0 and i < n_i:
            y[np.uintp(i)] += acc


def launch_kernel_0(y, A_lvl1_pos, A_lvl1_crd, A_vals, x, n_i, stream=0):
    """Launch kernel_0 on `stream` (warp_per_row)."""
    blocks = blocks_for(n_i * 8, 256, 4096)
    kernel_0[blocks, 256, stream](y, A_lvl1_pos, A_lvl1_crd, A_vals, x, n_i)


PLAN = [{'function': 'kernel_0', 'params': [['array', 'y'], ['pos', 'A', 1], ['crd', 'A', 1], ['vals', 'A'], ['array', 'x'], ['extent', 'i']], 'convert': {}, 'alias': {}, 'order': ['i', 'j'], 'sparse_output': False, 'rows': None, 'statement': 'y[i] += A[i, j] * x[j]', 'accumulate': True, 'overwrites': False, 'writer': 0, 'workspace': None}]
