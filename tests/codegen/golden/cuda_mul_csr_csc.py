# golden file: C[i, j] = A[i, j] * B[i, j]

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
def kernel_0(emit, C_lvl1_pos, C_lvl1_crd, C_vals, C_counts, A_lvl1_pos, A_lvl1_crd, A_vals, B_lvl1_pos, B_lvl1_crd, B_vals, n_i):
    """C[i, j] = A[i, j] * B[i, j]"""
    C_first = 0
    C_span = max(np.intp(n_i) - C_first, 0)
    C_chunks = min(C_span, len(C_counts))
    for C_chunk in range(cuda.grid(1), C_chunks, cuda.gridsize(1)):
        C_lo = C_first + C_span * C_chunk // C_chunks
        C_hi = C_first + C_span * (C_chunk + 1) // C_chunks
        C_n1 = C_counts[np.uintp(C_chunk), 1] if emit else 0
        C_last_p1 = -1
        C_last_c1 = 0
        for i in range(C_lo, C_hi):
            A_p1 = np.intp(ldg(A_lvl1_pos, np.uintp(i)))
            A_p1_end = np.intp(ldg(A_lvl1_pos, np.uintp(i + 1)))
            B_p1 = np.intp(ldg(B_lvl1_pos, np.uintp(i)))
            B_p1_end = np.intp(ldg(B_lvl1_pos, np.uintp(i + 1)))
            while A_p1 < A_p1_end and B_p1 < B_p1_end:
                A_c1 = np.intp(ldg(A_lvl1_crd, np.uintp(A_p1)))
                B_c1 = np.intp(ldg(B_lvl1_crd, np.uintp(B_p1)))
                if A_c1 < B_c1:
                    A_p1_lo = A_p1 + 1
                    A_p1_hi = A_p1_lo
                    A_p1_step = 1
                    while A_p1_hi < A_p1_end and np.intp(ldg(A_lvl1_crd, np.uintp(A_p1_hi))) < B_c1:
                        A_p1_lo = A_p1_hi + 1
                        A_p1_hi += A_p1_step
                        A_p1_step *= 2
                    A_p1_hi = min(A_p1_hi, A_p1_end)
                    while A_p1_lo < A_p1_hi:
                        A_p1_mid = A_p1_lo + A_p1_hi >> 1
                        if np.intp(ldg(A_lvl1_crd, np.uintp(A_p1_mid))) < B_c1:
                            A_p1_lo = A_p1_mid + 1
                        else:
                            A_p1_hi = A_p1_mid
                    A_p1 = A_p1_lo
                elif B_c1 < A_c1:
                    B_p1_lo = B_p1 + 1
                    B_p1_hi = B_p1_lo
                    B_p1_step = 1
                    while B_p1_hi < B_p1_end and np.intp(ldg(B_lvl1_crd, np.uintp(B_p1_hi))) < A_c1:
                        B_p1_lo = B_p1_hi + 1
                        B_p1_hi += B_p1_step
                        B_p1_step *= 2
                    B_p1_hi = min(B_p1_hi, B_p1_end)
                    while B_p1_lo < B_p1_hi:
                        B_p1_mid = B_p1_lo + B_p1_hi >> 1
                        if np.intp(ldg(B_lvl1_crd, np.uintp(B_p1_mid))) < A_c1:
                            B_p1_lo = B_p1_mid + 1
                        else:
                            B_p1_hi = B_p1_mid
                    B_p1 = B_p1_lo
                else:
                    j = A_c1
                    C_v = ldg(A_vals, np.uintp(A_p1)) * ldg(B_vals, np.uintp(B_p1))
                    if C_v != 0:
                        if C_last_p1 != i or C_last_c1 != j:
                            if emit:
                                C_lvl1_crd[np.uintp(C_n1)] = j
                                C_lvl1_pos[np.uintp(i + 1)] = C_n1 + 1
                            C_n1 += 1
                            C_last_p1 = i
                            C_last_c1 = j
                        C_q1 = C_n1 - 1
                        if emit:
                            C_vals[np.uintp(C_q1)] = C_v
                    A_p1 += 1
                    B_p1 += 1
        if emit == 0:
            C_counts[np.uintp(C_chunk), 1] = C_n1


def launch_kernel_0(emit, C_lvl1_pos, C_lvl1_crd, C_vals, C_counts, A_lvl1_pos, A_lvl1_crd, A_vals, B_lvl1_pos, B_lvl1_crd, B_vals, n_i, stream=0):
    """Launch kernel_0 on `stream` (thread_per_row)."""
    blocks = blocks_for(len(C_counts), 256, 4096)
    kernel_0[blocks, 256, stream](emit, C_lvl1_pos, C_lvl1_crd, C_vals, C_counts, A_lvl1_pos, A_lvl1_crd, A_vals, B_lvl1_pos, B_lvl1_crd, B_vals, n_i)


PLAN = [{'function': 'kernel_0', 'params': [['emit'], ['out_level', 'C', 1, 'pos'], ['out_level', 'C', 1, 'crd'], ['out_vals', 'C'], ['out_counts', 'C'], ['pos', 'A', 1], ['crd', 'A', 1], ['vals', 'A'], ['pos', 'B', 1], ['crd', 'B', 1], ['vals', 'B'], ['extent', 'i']], 'convert': {'B': '(d0, d1) -> (d0 : dense, d1 : compressed)'}, 'alias': {}, 'order': ['i', 'j'], 'sparse_output': True, 'rows': None, 'statement': 'C[i, j] = A[i, j] * B[i, j]', 'accumulate': False, 'overwrites': False, 'writer': 2, 'workspace': None, 'split': True}]
