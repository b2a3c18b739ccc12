# golden file: B[i, j] = A[i, j]

import numpy as np
from numba import njit, prange

from ustc.kernels._alloc import empty as _ustc_empty


@njit(cache=True, nogil=True, parallel=True)
def kernel_0(emit, B_lvl1_pos, B_lvl1_crd, B_lvl1_size, B_lvl2_size, B_lvl3_size, B_vals, B_counts, A_lvl1_pos, A_lvl1_crd, A_vals, n_i):
    """B[i, j] = A[i, j]"""
    B_first = 0
    B_span = max(np.intp(n_i) - B_first, 0)
    B_chunks = min(B_span, len(B_counts))
    for B_chunk_u in prange(B_chunks):
        B_chunk = np.intp(B_chunk_u)
        B_lo = B_first + B_span * B_chunk // B_chunks
        if B_lo > B_first:
            B_lo = min(B_first + B_span, (B_lo + 1) // 2 * 2)
        B_hi = B_first + B_span * (B_chunk + 1) // B_chunks
        if B_hi > B_first:
            B_hi = min(B_first + B_span, (B_hi + 1) // 2 * 2)
        B_n1 = B_counts[np.uintp(B_chunk), 1] if emit else 0
        B_last_p1 = -1
        B_last_c1 = 0
        B_lvl1_work = _ustc_empty(B_lvl1_size, np.intp)
        for B_gap1 in range(B_lvl1_size):
            B_lvl1_work[np.uintp(B_gap1)] = -1
        for i in range(B_lo, B_hi):
            for A_p1 in range(np.intp(A_lvl1_pos[np.uintp(i)]), np.intp(A_lvl1_pos[np.uintp(i + 1)])):
                j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                B_v = A_vals[np.uintp(A_p1)]
                if B_v != 0:
                    B_c0 = i // 2
                    B_c1 = j // 3
                    if emit == 2:
                        if B_last_p1 != B_c0:
                            B_last_p1 = B_c0
                            if np.intp(B_lvl1_pos[np.uintp(B_c0 + 1)]) - np.intp(B_lvl1_pos[np.uintp(B_c0)]) <= 32:
                                for B_gap1 in range(np.intp(B_lvl1_pos[np.uintp(B_c0)]) + 1, np.intp(B_lvl1_pos[np.uintp(B_c0 + 1)])):
                                    B_key1 = B_lvl1_crd[np.uintp(B_gap1)]
                                    B_hole1 = B_gap1 - 1
                                    while B_hole1 >= np.intp(B_lvl1_pos[np.uintp(B_c0)]) and B_lvl1_crd[np.uintp(B_hole1)] > B_key1:
                                        B_lvl1_crd[np.uintp(B_hole1 + 1)] = B_lvl1_crd[np.uintp(B_hole1)]
                                        B_hole1 = B_hole1 - 1
                                    B_lvl1_crd[np.uintp(B_hole1 + 1)] = B_key1
                            else:
                                B_lvl1_crd[np.intp(B_lvl1_pos[np.uintp(B_c0)]):np.intp(B_lvl1_pos[np.uintp(B_c0 + 1)])].sort()
                            for B_gap1 in range(np.intp(B_lvl1_pos[np.uintp(B_c0)]), np.intp(B_lvl1_pos[np.uintp(B_c0 + 1)])):
                                B_lvl1_work[np.uintp(np.intp(B_lvl1_crd[np.uintp(B_gap1)]))] = B_gap1
                    elif B_lvl1_work[np.uintp(B_c1)] != B_c0:
                        B_lvl1_work[np.uintp(B_c1)] = B_c0
                        if emit:
                            B_lvl1_crd[np.uintp(B_n1)] = B_c1
                            B_lvl1_pos[np.uintp(B_c0 + 1)] = B_n1 + 1
                            B_last_p1 = B_c0
                        B_n1 += 1
                    B_q1 = B_lvl1_work[np.uintp(B_c1)]
                    B_c2 = i % 2
                    B_q2 = B_q1 * B_lvl2_size + B_c2
                    B_c3 = j % 3
                    B_q3 = B_q2 * B_lvl3_size + B_c3
                    if emit == 2:
                        B_vals[np.uintp(B_q3)] = B_v
        if emit == 0:
            B_counts[np.uintp(B_chunk), 1] = B_n1
    return 0


@njit(cache=True, nogil=True)
def kernel_0_serial(emit, B_lvl1_pos, B_lvl1_crd, B_lvl1_size, B_lvl2_size, B_lvl3_size, B_vals, B_counts, A_lvl1_pos, A_lvl1_crd, A_vals, n_i):
    """B[i, j] = A[i, j] (serial: for small operands)"""
    B_first = 0
    B_span = max(np.intp(n_i) - B_first, 0)
    B_chunks = min(B_span, len(B_counts))
    for B_chunk in range(B_chunks):
        B_lo = B_first + B_span * B_chunk // B_chunks
        if B_lo > B_first:
            B_lo = min(B_first + B_span, (B_lo + 1) // 2 * 2)
        B_hi = B_first + B_span * (B_chunk + 1) // B_chunks
        if B_hi > B_first:
            B_hi = min(B_first + B_span, (B_hi + 1) // 2 * 2)
        B_n1 = B_counts[np.uintp(B_chunk), 1] if emit else 0
        B_last_p1 = -1
        B_last_c1 = 0
        B_lvl1_work = _ustc_empty(B_lvl1_size, np.intp)
        for B_gap1 in range(B_lvl1_size):
            B_lvl1_work[np.uintp(B_gap1)] = -1
        for i in range(B_lo, B_hi):
            for A_p1 in range(np.intp(A_lvl1_pos[np.uintp(i)]), np.intp(A_lvl1_pos[np.uintp(i + 1)])):
                j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                B_v = A_vals[np.uintp(A_p1)]
                if B_v != 0:
                    B_c0 = i // 2
                    B_c1 = j // 3
                    if emit == 2:
                        if B_last_p1 != B_c0:
                            B_last_p1 = B_c0
                            if np.intp(B_lvl1_pos[np.uintp(B_c0 + 1)]) - np.intp(B_lvl1_pos[np.uintp(B_c0)]) <= 32:
                                for B_gap1 in range(np.intp(B_lvl1_pos[np.uintp(B_c0)]) + 1, np.intp(B_lvl1_pos[np.uintp(B_c0 + 1)])):
                                    B_key1 = B_lvl1_crd[np.uintp(B_gap1)]
                                    B_hole1 = B_gap1 - 1
                                    while B_hole1 >= np.intp(B_lvl1_pos[np.uintp(B_c0)]) and B_lvl1_crd[np.uintp(B_hole1)] > B_key1:
                                        B_lvl1_crd[np.uintp(B_hole1 + 1)] = B_lvl1_crd[np.uintp(B_hole1)]
                                        B_hole1 = B_hole1 - 1
                                    B_lvl1_crd[np.uintp(B_hole1 + 1)] = B_key1
                            else:
                                B_lvl1_crd[np.intp(B_lvl1_pos[np.uintp(B_c0)]):np.intp(B_lvl1_pos[np.uintp(B_c0 + 1)])].sort()
                            for B_gap1 in range(np.intp(B_lvl1_pos[np.uintp(B_c0)]), np.intp(B_lvl1_pos[np.uintp(B_c0 + 1)])):
                                B_lvl1_work[np.uintp(np.intp(B_lvl1_crd[np.uintp(B_gap1)]))] = B_gap1
                    elif B_lvl1_work[np.uintp(B_c1)] != B_c0:
                        B_lvl1_work[np.uintp(B_c1)] = B_c0
                        if emit:
                            B_lvl1_crd[np.uintp(B_n1)] = B_c1
                            B_lvl1_pos[np.uintp(B_c0 + 1)] = B_n1 + 1
                            B_last_p1 = B_c0
                        B_n1 += 1
                    B_q1 = B_lvl1_work[np.uintp(B_c1)]
                    B_c2 = i % 2
                    B_q2 = B_q1 * B_lvl2_size + B_c2
                    B_c3 = j % 3
                    B_q3 = B_q2 * B_lvl3_size + B_c3
                    if emit == 2:
                        B_vals[np.uintp(B_q3)] = B_v
        if emit == 0:
            B_counts[np.uintp(B_chunk), 1] = B_n1
    return 0


PLAN = [{'function': 'kernel_0', 'params': [['emit'], ['out_level', 'B', 1, 'pos'], ['out_level', 'B', 1, 'crd'], ['out_size', 'B', 1], ['out_size', 'B', 2], ['out_size', 'B', 3], ['out_vals', 'B'], ['out_counts', 'B'], ['pos', 'A', 1], ['crd', 'A', 1], ['vals', 'A'], ['extent', 'i']], 'convert': {}, 'alias': {}, 'order': ['i', 'j'], 'sparse_output': True, 'rows': None, 'statement': 'B[i, j] = A[i, j]', 'accumulate': False, 'overwrites': False, 'writer': 3, 'workspace': None, 'split': True}]
