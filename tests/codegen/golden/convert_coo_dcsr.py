# golden file: B[i, j] = A[i, j]

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True, parallel=True)
def kernel_0(emit, B_lvl0_crd, B_lvl1_pos, B_lvl1_crd, B_vals, B_counts, A_lvl0_pos, A_lvl0_crd, A_lvl1_crd, A_vals):
    """B[i, j] = A[i, j]"""
    B_first = np.intp(A_lvl0_pos[0])
    B_span = max(np.intp(A_lvl0_pos[1]) - B_first, 0)
    B_chunks = min(B_span, len(B_counts))
    for B_chunk_u in prange(B_chunks):
        B_chunk = np.intp(B_chunk_u)
        B_lo = B_first + B_span * B_chunk // B_chunks
        while B_lo > B_first and B_lo < B_first + B_span and np.intp(A_lvl0_crd[np.uintp(B_lo)]) == np.intp(A_lvl0_crd[np.uintp(B_lo - 1)]):
            B_lo += 1
        B_hi = B_first + B_span * (B_chunk + 1) // B_chunks
        while B_hi > B_first and B_hi < B_first + B_span and np.intp(A_lvl0_crd[np.uintp(B_hi)]) == np.intp(A_lvl0_crd[np.uintp(B_hi - 1)]):
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
            A_c0 = np.intp(A_lvl0_crd[np.uintp(A_p0)])
            i = A_c0
            A_r0 = A_p0 + 1
            while A_r0 < A_p0_end and np.intp(A_lvl0_crd[np.uintp(A_r0)]) == A_c0:
                A_r0 += 1
            for A_p1 in range(A_p0, A_r0):
                j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                B_v = A_vals[np.uintp(A_p1)]
                if B_v != 0:
                    if B_last_p0 != 0 or B_last_c0 != i:
                        if emit:
                            B_lvl0_crd[np.uintp(B_n0)] = i
                        B_n0 += 1
                        B_last_p0 = 0
                        B_last_c0 = i
                    B_q0 = B_n0 - 1
                    if B_last_p1 != B_q0 or B_last_c1 != j:
                        if emit:
                            B_lvl1_crd[np.uintp(B_n1)] = j
                            B_lvl1_pos[np.uintp(B_q0 + 1)] = B_n1 + 1
                        B_n1 += 1
                        B_last_p1 = B_q0
                        B_last_c1 = j
                    B_q1 = B_n1 - 1
                    if emit:
                        B_vals[np.uintp(B_q1)] = B_v
            A_p0 = A_r0
        if emit == 0:
            B_counts[np.uintp(B_chunk), 0] = B_n0
            B_counts[np.uintp(B_chunk), 1] = B_n1
    return 0


@njit(cache=True, nogil=True)
def kernel_0_serial(emit, B_lvl0_crd, B_lvl1_pos, B_lvl1_crd, B_vals, B_counts, A_lvl0_pos, A_lvl0_crd, A_lvl1_crd, A_vals):
    """B[i, j] = A[i, j] (serial: for small operands)"""
    B_first = np.intp(A_lvl0_pos[0])
    B_span = max(np.intp(A_lvl0_pos[1]) - B_first, 0)
    B_chunks = min(B_span, len(B_counts))
    for B_chunk in range(B_chunks):
        B_lo = B_first + B_span * B_chunk // B_chunks
        while B_lo > B_first and B_lo < B_first + B_span and np.intp(A_lvl0_crd[np.uintp(B_lo)]) == np.intp(A_lvl0_crd[np.uintp(B_lo - 1)]):
            B_lo += 1
        B_hi = B_first + B_span * (B_chunk + 1) // B_chunks
        while B_hi > B_first and B_hi < B_first + B_span and np.intp(A_lvl0_crd[np.uintp(B_hi)]) == np.intp(A_lvl0_crd[np.uintp(B_hi - 1)]):
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
            A_c0 = np.intp(A_lvl0_crd[np.uintp(A_p0)])
            i = A_c0
            A_r0 = A_p0 + 1
            while A_r0 < A_p0_end and np.intp(A_lvl0_crd[np.uintp(A_r0)]) == A_c0:
                A_r0 += 1
            for A_p1 in range(A_p0, A_r0):
                j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                B_v = A_vals[np.uintp(A_p1)]
                if B_v != 0:
                    if B_last_p0 != 0 or B_last_c0 != i:
                        if emit:
                            B_lvl0_crd[np.uintp(B_n0)] = i
                        B_n0 += 1
                        B_last_p0 = 0
                        B_last_c0 = i
                    B_q0 = B_n0 - 1
                    if B_last_p1 != B_q0 or B_last_c1 != j:
                        if emit:
                            B_lvl1_crd[np.uintp(B_n1)] = j
                            B_lvl1_pos[np.uintp(B_q0 + 1)] = B_n1 + 1
                        B_n1 += 1
                        B_last_p1 = B_q0
                        B_last_c1 = j
                    B_q1 = B_n1 - 1
                    if emit:
                        B_vals[np.uintp(B_q1)] = B_v
            A_p0 = A_r0
        if emit == 0:
            B_counts[np.uintp(B_chunk), 0] = B_n0
            B_counts[np.uintp(B_chunk), 1] = B_n1
    return 0


PLAN = [{'function': 'kernel_0', 'params': [['emit'], ['out_level', 'B', 0, 'crd'], ['out_level', 'B', 1, 'pos'], ['out_level', 'B', 1, 'crd'], ['out_vals', 'B'], ['out_counts', 'B'], ['pos', 'A', 0], ['crd', 'A', 0], ['crd', 'A', 1], ['vals', 'A']], 'convert': {}, 'alias': {}, 'order': ['i', 'j'], 'sparse_output': True, 'rows': None, 'statement': 'B[i, j] = A[i, j]', 'accumulate': False, 'overwrites': False, 'writer': 2, 'workspace': None, 'split': True}]
