# golden file: B[i0, i1] = A[i0, i1]

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


# schedule: thread_per_row, 256 threads/block — the writer's chunks carry insertion state: a thread per chunk
# promises: at most 128 registers a thread (2 blocks of 256 threads a multiprocessor), no warp shuffles, no atomics, read-only loads
@cuda.jit(cache=True, **bounds(256, 2))
def kernel_0(emit, B_lvl0_crd, B_lvl1_pos, B_lvl1_crd, B_vals, B_counts, A_lvl0_pos, A_lvl0_crd, A_lvl1_crd, A_vals):
    """B[i0, i1] = A[i0, i1]"""
    B_first = np.intp(ldg(A_lvl0_pos, 0))
    B_span = max(np.intp(ldg(A_lvl0_pos, 1)) - B_first, 0)
    B_chunks = min(B_span, len(B_counts))
    for B_chunk in range(cuda.grid(1), B_chunks, cuda.gridsize(1)):
        B_lo = B_first + B_span * B_chunk // B_chunks
        while B_lo > B_first and B_lo < B_first + B_span and np.intp(ldg(A_lvl0_crd, np.uintp(B_lo))) == np.intp(ldg(A_lvl0_crd, np.uintp(B_lo - 1))):
            B_lo += 1
        B_hi = B_first + B_span * (B_chunk + 1) // B_chunks
        while B_hi > B_first and B_hi < B_first + B_span and np.intp(ldg(A_lvl0_crd, np.uintp(B_hi))) == np.intp(ldg(A_lvl0_crd, np.uintp(B_hi - 1))):
            B_hi += 1
        B_n0 = B_counts[np.uintp(B_chunk), 0] if emit else 0
        B_last_p0 = -1
        B_last_c0 = 0
        B_n1 = B_counts[np.uintp(B_chunk), 1] if emit else 0
        B_last_p1 = -1
        B_last_c1 = 0
        A_p0 = B_lo
        A_p0_end = B_hi
        while A_p0 < A_p0_end:
            A_c0 = np.intp(ldg(A_lvl0_crd, np.uintp(A_p0)))
            i0 = A_c0
            A_r0 = A_p0 + 1
            while A_r0 < A_p0_end and np.intp(ldg(A_lvl0_crd, np.uintp(A_r0))) == A_c0:
                A_r0 += 1
            for A_p1 in range(A_p0, A_r0):
                i1 = np.intp(ldg(A_lvl1_crd, np.uintp(A_p1)))
                B_v = ldg(A_vals, np.uintp(A_p1))
                if B_v != 0:
                    if B_last_p0 != 0 or B_last_c0 != i0:
                        if emit:
                            B_lvl0_crd[np.uintp(B_n0)] = i0
                        B_n0 += 1
                        B_last_p0 = 0
                        B_last_c0 = i0
                    B_q0 = B_n0 - 1
                    if B_last_p1 != B_q0 or B_last_c1 != i1:
                        if emit:
                            B_lvl1_crd[np.uintp(B_n1)] = i1
                            B_lvl1_pos[np.uintp(B_q0 + 1)] = B_n1 + 1
                        B_n1 += 1
                        B_last_p1 = B_q0
                        B_last_c1 = i1
                    B_q1 = B_n1 - 1
                    if emit:
                        B_vals[np.uintp(B_q1)] = B_v
            A_p0 = A_r0
        if emit == 0:
            B_counts[np.uintp(B_chunk), 0] = B_n0
            B_counts[np.uintp(B_chunk), 1] = B_n1


def launch_kernel_0(emit, B_lvl0_crd, B_lvl1_pos, B_lvl1_crd, B_vals, B_counts, A_lvl0_pos, A_lvl0_crd, A_lvl1_crd, A_vals, stream=0):
    """Launch kernel_0 on `stream` (thread_per_row)."""
    blocks = blocks_for(len(B_counts), 256, 4096)
    kernel_0[blocks, 256, stream](emit, B_lvl0_crd, B_lvl1_pos, B_lvl1_crd, B_vals, B_counts, A_lvl0_pos, A_lvl0_crd, A_lvl1_crd, A_vals)


PLAN = [{'function': 'kernel_0', 'params': [['emit'], ['out_level', 'B', 0, 'crd'], ['out_level', 'B', 1, 'pos'], ['out_level', 'B', 1, 'crd'], ['out_vals', 'B'], ['out_counts', 'B'], ['pos', 'A', 0], ['crd', 'A', 0], ['crd', 'A', 1], ['vals', 'A']], 'convert': {}, 'alias': {}, 'order': ['i0', 'i1'], 'sparse_output': True, 'rows': None, 'statement': 'B[i0, i1] = A[i0, i1]', 'accumulate': False, 'overwrites': False, 'writer': 2, 'workspace': None, 'split': True}]
