# golden file: B[i, j] = A[i, j]

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True, parallel=True)
def kernel_0(emit, B_lvl1_size, B_lvl2_crd, B_vals, B_counts, A_lvl1_pos, A_lvl1_crd, A_vals, n_i):
    """B[i, j] = A[i, j]"""
    B_first = 0
    B_span = max(np.intp(n_i) - B_first, 0)
    B_chunks = min(B_span, len(B_counts))
    for B_chunk_u in prange(B_chunks):
        B_chunk = np.intp(B_chunk_u)
        B_lo = B_first + B_span * B_chunk // B_chunks
        B_hi = B_first + B_span * (B_chunk + 1) // B_chunks
        B_n2 = B_counts[np.uintp(B_chunk), 2] if emit else 0
        B_last_p2 = -1
        B_last_c2 = 0
        for i in range(B_lo, B_hi):
            for A_p1 in range(np.intp(A_lvl1_pos[np.uintp(i)]), np.intp(A_lvl1_pos[np.uintp(i + 1)])):
                j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                B_v = A_vals[np.uintp(A_p1)]
                if B_v != 0:
                    B_c1 = j // 4
                    B_q1 = i * B_lvl1_size + B_c1
                    B_c2 = j % 4
                    if B_last_p2 != B_q1:
                        B_last_p2 = B_q1
                        if emit == 2:
                            B_n2 = 1
                            while B_n2 < 2 and np.intp(B_lvl2_crd[np.uintp(B_q1 * 2 + B_n2)]) > np.intp(B_lvl2_crd[np.uintp(B_q1 * 2 + (B_n2 - 1))]):
                                B_n2 += 1
                            B_last_c2 = B_n2 - 1
                            for B_gap2 in range(2):
                                if B_last_c2 >= 0 and B_last_c2 + min(2 - B_n2, np.intp(B_lvl2_crd[np.uintp(B_q1 * 2 + B_last_c2)]) - B_last_c2) == 1 - B_gap2:
                                    B_lvl2_crd[np.uintp(B_q1 * 2 + (1 - B_gap2))] = np.intp(B_lvl2_crd[np.uintp(B_q1 * 2 + B_last_c2)])
                                    B_last_c2 = B_last_c2 - 1
                                else:
                                    B_lvl2_crd[np.uintp(B_q1 * 2 + (1 - B_gap2))] = 1 - B_gap2
                        B_last_c2 = 0
                    if emit == 2:
                        pass
                    elif emit:
                        if B_last_c2 < 2:
                            B_lvl2_crd[np.uintp(B_q1 * 2 + B_last_c2)] = B_c2
                    elif B_last_c2 == 2 and B_n2 == 0:
                        B_n2 = B_q1 + 1
                    B_gap2 = B_last_c2 + min(2 - B_n2, B_c2 - B_last_c2)
                    B_last_c2 += 1
                    B_q2 = B_q1 * 2 + B_gap2
                    if emit == 2:
                        B_vals[np.uintp(B_q2)] = B_v
        if emit == 0:
            B_counts[np.uintp(B_chunk), 2] = B_n2
    if emit == 0:
        B_refused2 = 0
        for B_row2 in range(B_chunks):
            if B_refused2 != 0:
                B_counts[np.uintp(B_row2), 2] = 0
            else:
                B_refused2 = B_counts[np.uintp(B_row2), 2]
    return 0


@njit(cache=True, nogil=True)
def kernel_0_serial(emit, B_lvl1_size, B_lvl2_crd, B_vals, B_counts, A_lvl1_pos, A_lvl1_crd, A_vals, n_i):
    """B[i, j] = A[i, j] (serial: for small operands)"""
    B_first = 0
    B_span = max(np.intp(n_i) - B_first, 0)
    B_chunks = min(B_span, len(B_counts))
    for B_chunk in range(B_chunks):
        B_lo = B_first + B_span * B_chunk // B_chunks
        B_hi = B_first + B_span * (B_chunk + 1) // B_chunks
        B_n2 = B_counts[np.uintp(B_chunk), 2] if emit else 0
        B_last_p2 = -1
        B_last_c2 = 0
        for i in range(B_lo, B_hi):
            for A_p1 in range(np.intp(A_lvl1_pos[np.uintp(i)]), np.intp(A_lvl1_pos[np.uintp(i + 1)])):
                j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                B_v = A_vals[np.uintp(A_p1)]
                if B_v != 0:
                    B_c1 = j // 4
                    B_q1 = i * B_lvl1_size + B_c1
                    B_c2 = j % 4
                    if B_last_p2 != B_q1:
                        B_last_p2 = B_q1
                        if emit == 2:
                            B_n2 = 1
                            while B_n2 < 2 and np.intp(B_lvl2_crd[np.uintp(B_q1 * 2 + B_n2)]) > np.intp(B_lvl2_crd[np.uintp(B_q1 * 2 + (B_n2 - 1))]):
                                B_n2 += 1
                            B_last_c2 = B_n2 - 1
                            for B_gap2 in range(2):
                                if B_last_c2 >= 0 and B_last_c2 + min(2 - B_n2, np.intp(B_lvl2_crd[np.uintp(B_q1 * 2 + B_last_c2)]) - B_last_c2) == 1 - B_gap2:
                                    B_lvl2_crd[np.uintp(B_q1 * 2 + (1 - B_gap2))] = np.intp(B_lvl2_crd[np.uintp(B_q1 * 2 + B_last_c2)])
                                    B_last_c2 = B_last_c2 - 1
                                else:
                                    B_lvl2_crd[np.uintp(B_q1 * 2 + (1 - B_gap2))] = 1 - B_gap2
                        B_last_c2 = 0
                    if emit == 2:
                        pass
                    elif emit:
                        if B_last_c2 < 2:
                            B_lvl2_crd[np.uintp(B_q1 * 2 + B_last_c2)] = B_c2
                    elif B_last_c2 == 2 and B_n2 == 0:
                        B_n2 = B_q1 + 1
                    B_gap2 = B_last_c2 + min(2 - B_n2, B_c2 - B_last_c2)
                    B_last_c2 += 1
                    B_q2 = B_q1 * 2 + B_gap2
                    if emit == 2:
                        B_vals[np.uintp(B_q2)] = B_v
        if emit == 0:
            B_counts[np.uintp(B_chunk), 2] = B_n2
    if emit == 0:
        B_refused2 = 0
        for B_row2 in range(B_chunks):
            if B_refused2 != 0:
                B_counts[np.uintp(B_row2), 2] = 0
            else:
                B_refused2 = B_counts[np.uintp(B_row2), 2]
    return 0


PLAN = [{'function': 'kernel_0', 'params': [['emit'], ['out_size', 'B', 1], ['out_level', 'B', 2, 'crd'], ['out_vals', 'B'], ['out_counts', 'B'], ['pos', 'A', 1], ['crd', 'A', 1], ['vals', 'A'], ['extent', 'i']], 'convert': {}, 'alias': {}, 'order': ['i', 'j'], 'sparse_output': True, 'rows': None, 'statement': 'B[i, j] = A[i, j]', 'accumulate': False, 'overwrites': False, 'writer': 3, 'workspace': None, 'split': True}]
