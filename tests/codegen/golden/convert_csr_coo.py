# golden file: B[i, j] = A[i, j]

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True, parallel=True)
def kernel_0(emit, B_lvl0_crd, B_lvl1_crd, B_vals, B_counts, A_lvl1_pos, A_lvl1_crd, A_vals, n_i):
    """B[i, j] = A[i, j]"""
    B_first = 0
    B_span = max(np.intp(n_i) - B_first, 0)
    B_chunks = min(B_span, len(B_counts))
    for B_chunk_u in prange(B_chunks):
        B_chunk = np.intp(B_chunk_u)
        B_lo = B_first + B_span * B_chunk // B_chunks
        B_hi = B_first + B_span * (B_chunk + 1) // B_chunks
        B_n0 = B_counts[np.uintp(B_chunk), 0] if emit else 0
        B_last_p0 = -1
        B_last_c0 = 0
        B_n1 = B_counts[np.uintp(B_chunk), 1] if emit else 0
        B_last_p1 = -1
        B_last_c1 = 0
        for i in range(B_lo, B_hi):
            for A_p1 in range(np.intp(A_lvl1_pos[np.uintp(i)]), np.intp(A_lvl1_pos[np.uintp(i + 1)])):
                j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                B_v = A_vals[np.uintp(A_p1)]
                if B_v != 0:
                    if emit:
                        B_lvl0_crd[np.uintp(B_n0)] = i
                    B_n0 += 1
                    B_last_p0 = 0
                    B_last_c0 = i
                    B_q0 = B_n0 - 1
                    if emit:
                        B_lvl1_crd[np.uintp(B_q0)] = j
                    if emit:
                        B_vals[np.uintp(B_q0)] = B_v
        if emit == 0:
            B_counts[np.uintp(B_chunk), 0] = B_n0
            B_counts[np.uintp(B_chunk), 1] = B_n1
    return 0


@njit(cache=True, nogil=True)
def kernel_0_serial(emit, B_lvl0_crd, B_lvl1_crd, B_vals, B_counts, A_lvl1_pos, A_lvl1_crd, A_vals, n_i):
    """B[i, j] = A[i, j] (serial: for small operands)"""
    B_first = 0
    B_span = max(np.intp(n_i) - B_first, 0)
    B_chunks = min(B_span, len(B_counts))
    for B_chunk in range(B_chunks):
        B_lo = B_first + B_span * B_chunk // B_chunks
        B_hi = B_first + B_span * (B_chunk + 1) // B_chunks
        B_n0 = B_counts[np.uintp(B_chunk), 0] if emit else 0
        B_last_p0 = -1
        B_last_c0 = 0
        B_n1 = B_counts[np.uintp(B_chunk), 1] if emit else 0
        B_last_p1 = -1
        B_last_c1 = 0
        for i in range(B_lo, B_hi):
            for A_p1 in range(np.intp(A_lvl1_pos[np.uintp(i)]), np.intp(A_lvl1_pos[np.uintp(i + 1)])):
                j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                B_v = A_vals[np.uintp(A_p1)]
                if B_v != 0:
                    if emit:
                        B_lvl0_crd[np.uintp(B_n0)] = i
                    B_n0 += 1
                    B_last_p0 = 0
                    B_last_c0 = i
                    B_q0 = B_n0 - 1
                    if emit:
                        B_lvl1_crd[np.uintp(B_q0)] = j
                    if emit:
                        B_vals[np.uintp(B_q0)] = B_v
        if emit == 0:
            B_counts[np.uintp(B_chunk), 0] = B_n0
            B_counts[np.uintp(B_chunk), 1] = B_n1
    return 0


PLAN = [{'function': 'kernel_0', 'params': [['emit'], ['out_level', 'B', 0, 'crd'], ['out_level', 'B', 1, 'crd'], ['out_vals', 'B'], ['out_counts', 'B'], ['pos', 'A', 1], ['crd', 'A', 1], ['vals', 'A'], ['extent', 'i']], 'convert': {}, 'alias': {}, 'order': ['i', 'j'], 'sparse_output': True, 'rows': None, 'statement': 'B[i, j] = A[i, j]', 'accumulate': False, 'overwrites': False, 'writer': 2, 'workspace': None, 'split': True}]
