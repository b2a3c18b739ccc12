# golden file: C[i, j] = A[i, j] * B[i, j]

import numpy as np
from numba import config, cuda


def blocks_for(work, threads, limit):
    """Blocks for `work` grid-stride iterations: at least 1, at most `limit`."""
    return max(1, min(limit, (work + threads - 1) // threads))


def bounds(threads, blocks):
    """cuda.jit launch bounds: at most `threads` a block, registers left for `blocks` blocks
    a multiprocessor (none in the CUDA simulator, whose cuda.jit takes none)."""
    return {} if config.ENABLE_CUDASIM else {"launch_bounds": (threads, blocks)}


# schedule: thread_per_row, 256 threads/block — no shared row reduction
# promises: at most 128 registers a thread (2 blocks of 256 threads a multiprocessor), no warp shuffles, no atomics
@cuda.jit(cache=True, **bounds(256, 2))
def kernel_0(emit, C_crd0, C_crd1, C_vals, C_offsets, A_lvl1_pos, A_lvl1_crd, A_vals, B_lvl1_pos, B_lvl1_crd, B_vals, n_i):
    """C[i, j] = A[i, j] * B[i, j]"""
    C_cap = len(C_vals)
    for i in range(cuda.grid(1), n_i, cuda.gridsize(1)):
        C_n = C_offsets[np.uintp(i)] if emit else 0
        A_p1 = np.intp(A_lvl1_pos[np.uintp(i)])
        A_p1_end = np.intp(A_lvl1_pos[np.uintp(i + 1)])
        B_p1 = np.intp(B_lvl1_pos[np.uintp(i)])
        B_p1_end = np.intp(B_lvl1_pos[np.uintp(i + 1)])
        while A_p1 < A_p1_end and B_p1 < B_p1_end:
            A_c1 = np.intp(A_lvl1_crd[np.uintp(A_p1)])
            B_c1 = np.intp(B_lvl1_crd[np.uintp(B_p1)])
            if A_c1 < B_c1:
                A_p1_lo = A_p1 + 1
                A_p1_hi = A_p1_lo
                A_p1_step = 1
                while A_p1_hi < A_p1_end and np.intp(A_lvl1_crd[np.uintp(A_p1_hi)]) < B_c1:
                    A_p1_lo = A_p1_hi + 1
                    A_p1_hi += A_p1_step
                    A_p1_step *= 2
                A_p1_hi = min(A_p1_hi, A_p1_end)
                while A_p1_lo < A_p1_hi:
                    A_p1_mid = A_p1_lo + A_p1_hi >> 1
                    if np.intp(A_lvl1_crd[np.uintp(A_p1_mid)]) < B_c1:
                        A_p1_lo = A_p1_mid + 1
                    else:
                        A_p1_hi = A_p1_mid
                A_p1 = A_p1_lo
            elif B_c1 < A_c1:
                B_p1_lo = B_p1 + 1
                B_p1_hi = B_p1_lo
                B_p1_step = 1
                while B_p1_hi < B_p1_end and np.intp(B_lvl1_crd[np.uintp(B_p1_hi)]) < A_c1:
                    B_p1_lo = B_p1_hi + 1
                    B_p1_hi += B_p1_step
                    B_p1_step *= 2
                B_p1_hi = min(B_p1_hi, B_p1_end)
                while B_p1_lo < B_p1_hi:
                    B_p1_mid = B_p1_lo + B_p1_hi >> 1
                    if np.intp(B_lvl1_crd[np.uintp(B_p1_mid)]) < A_c1:
                        B_p1_lo = B_p1_mid + 1
                    else:
                        B_p1_hi = B_p1_mid
                B_p1 = B_p1_lo
            else:
                j = A_c1
                if emit and C_n < C_cap:
                    C_crd0[np.uintp(C_n)] = i
                    C_crd1[np.uintp(C_n)] = j
                    C_vals[np.uintp(C_n)] = A_vals[np.uintp(A_p1)] * B_vals[np.uintp(B_p1)]
                C_n += 1
                A_p1 += 1
                B_p1 += 1
        if emit != 1:
            C_offsets[np.uintp(i + 1)] = C_n


def launch_kernel_0(emit, C_crd0, C_crd1, C_vals, C_offsets, A_lvl1_pos, A_lvl1_crd, A_vals, B_lvl1_pos, B_lvl1_crd, B_vals, n_i, stream=0):
    """Launch kernel_0 on `stream` (thread_per_row)."""
    blocks = blocks_for(n_i, 256, 4096)
    kernel_0[blocks, 256, stream](emit, C_crd0, C_crd1, C_vals, C_offsets, A_lvl1_pos, A_lvl1_crd, A_vals, B_lvl1_pos, B_lvl1_crd, B_vals, n_i)


PLAN = [{'function': 'kernel_0', 'params': [['emit'], ['out_crd', 'C', 0], ['out_crd', 'C', 1], ['out_vals', 'C'], ['out_offsets', 'C'], ['pos', 'A', 1], ['crd', 'A', 1], ['vals', 'A'], ['pos', 'B', 1], ['crd', 'B', 1], ['vals', 'B'], ['extent', 'i']], 'convert': {'B': '(d0, d1) -> (d0 : dense, d1 : compressed)'}, 'alias': {}, 'order': ['i', 'j'], 'sparse_output': True, 'rows': 'i', 'statement': 'C[i, j] = A[i, j] * B[i, j]', 'accumulate': False, 'overwrites': False, 'writer': 0, 'workspace': None}]
