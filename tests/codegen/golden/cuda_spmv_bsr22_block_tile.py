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


# schedule: block_tile(width=2, loop=v_i_mod2), 256 threads/block — requested
# promises: at most 128 registers a thread (2 blocks of 256 threads a multiprocessor), no warp shuffles, no atomics, read-only loads
@cuda.jit(cache=True, **bounds(256, 2))
def kernel_0(y, A_lvl0_size, A_lvl1_pos, A_lvl1_crd, A_lvl2_size, A_lvl3_size, A_vals, x, n_i, n_j):
    """y[i] += A[i, j] * x[j]"""
    lane = cuda.threadIdx.x % 2  # 2 lanes share the loop over v_i_mod2
    group = cuda.threadIdx.x % 32 // 2  # 16 v_i_div2 per warp
    for v_i_div2_base in range(cuda.grid(1) // 32 * 16, A_lvl0_size, cuda.gridsize(1) // 32 * 16):
        v_i_div2 = v_i_div2_base + group
        if v_i_div2 < A_lvl0_size:
            for A_p1 in range(np.intp(ldg(A_lvl1_pos, np.uintp(v_i_div2))), np.intp(ldg(A_lvl1_pos, np.uintp(v_i_div2 + 1)))):
                v_j_div2 = np.intp(ldg(A_lvl1_crd, np.uintp(A_p1)))
                for v_i_mod2 in range(max(0, -(2 * v_i_div2)) + lane, min(A_lvl2_size, n_i - 2 * v_i_div2), 2):
                    i = 2 * v_i_div2 + v_i_mod2
                    A_p2 = A_p1 * A_lvl2_size + v_i_mod2
                    acc = 0.0
                    for v_j_mod2 in range(max(0, -(2 * v_j_div2)), min(A_lvl3_size, n_j - 2 * v_j_div2)):
                        j = 2 * v_j_div2 + v_j_mod2
                        A_p3 = A_p2 * A_lvl3_size + v_j_mod2
                        acc += ldg(A_vals, np.uintp(A_p3)) * ldg(x, np.uintp(j))
                    y[np.uintp(i)] += acc


def launch_kernel_0(y, A_lvl0_size, A_lvl1_pos, A_lvl1_crd, A_lvl2_size, A_lvl3_size, A_vals, x, n_i, n_j, stream=0):
    """Launch kernel_0 on `stream` (block_tile)."""
    blocks = blocks_for(A_lvl0_size * 2, 256, 4096)
    kernel_0[blocks, 256, stream](y, A_lvl0_size, A_lvl1_pos, A_lvl1_crd, A_lvl2_size, A_lvl3_size, A_vals, x, n_i, n_j)


PLAN = [{'function': 'kernel_0', 'params': [['array', 'y'], ['size', 'A', 0], ['pos', 'A', 1], ['crd', 'A', 1], ['size', 'A', 2], ['size', 'A', 3], ['vals', 'A'], ['array', 'x'], ['extent', 'i'], ['extent', 'j']], 'convert': {}, 'alias': {}, 'order': ['v_i_div2', 'v_j_div2', 'v_i_mod2', 'v_j_mod2'], 'sparse_output': False, 'rows': None, 'statement': 'y[i] += A[i, j] * x[j]', 'accumulate': True, 'overwrites': False, 'writer': 0, 'workspace': None}]
