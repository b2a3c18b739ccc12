# golden file: C[i, j] = A[i, j] * B[i, k] * D[k, j]

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True, parallel=True)
def kernel_0(emit, C_lvl1_size, C_lvl2_crd, C_vals, C_counts, A_lvl1_size, A_lvl2_crd, A_vals, B, D, n_i, n_j, n_k):
    """C[i, j] = A[i, j] * B[i, k] * D[k, j]"""
    C_first = 0
    C_span = max(np.intp(n_i) - C_first, 0)
    C_chunks = min(C_span, len(C_counts))
    for C_chunk_u in prange(C_chunks):
        C_chunk = np.intp(C_chunk_u)
        C_lo = C_first + C_span * C_chunk // C_chunks
        C_hi = C_first + C_span * (C_chunk + 1) // C_chunks
        C_n2 = C_counts[np.uintp(C_chunk), 2] if emit else 0
        C_last_p2 = -1
        C_last_c2 = 0
        for i in range(C_lo, C_hi):
            for v_j_div4 in range(A_lvl1_size):
                A_p1 = i * A_lvl1_size + v_j_div4
                for A_p2 in range(A_p1 * 2, A_p1 * 2 + 2):
                    v_j_mod4 = np.intp(A_lvl2_crd[np.uintp(A_p2)])
                    j = 4 * v_j_div4 + v_j_mod4
                    if 0 <= j and j < n_j:
                        acc = 0.0
                        found = False
                        k_start = 0
                        k_stop = n_k
                        if k_stop - k_start >= 16:
                            k_mid = k_start + (k_stop - k_start & -2)
                            acc_1 = 0.0
                            for k_2 in range(k_start, k_mid, 2):
                                k = k_2
                                found = True
                                acc += A_vals[np.uintp(A_p2)] * B[np.uintp(i), np.uintp(k)] * D[np.uintp(k), np.uintp(j)]
                                k = k_2 + 1
                                found = True
                                acc_1 += A_vals[np.uintp(A_p2)] * B[np.uintp(i), np.uintp(k)] * D[np.uintp(k), np.uintp(j)]
                            for k in range(k_mid, k_stop):
                                found = True
                                acc += A_vals[np.uintp(A_p2)] * B[np.uintp(i), np.uintp(k)] * D[np.uintp(k), np.uintp(j)]
                            acc += acc_1
                        else:
                            for k in range(k_start, k_stop):
                                found = True
                                acc += A_vals[np.uintp(A_p2)] * B[np.uintp(i), np.uintp(k)] * D[np.uintp(k), np.uintp(j)]
                        if found:
                            C_v = acc
                            if C_v != 0:
                                C_c1 = j // 4
                                C_q1 = i * C_lvl1_size + C_c1
                                C_c2 = j % 4
                                if C_last_p2 != C_q1:
                                    C_last_p2 = C_q1
                                    if emit == 2:
                                        C_n2 = 1
                                        while C_n2 < 2 and np.intp(C_lvl2_crd[np.uintp(C_q1 * 2 + C_n2)]) > np.intp(C_lvl2_crd[np.uintp(C_q1 * 2 + (C_n2 - 1))]):
                                            C_n2 += 1
                                        C_last_c2 = C_n2 - 1
                                        for C_gap2 in range(2):
                                            if C_last_c2 >= 0 and C_last_c2 + min(2 - C_n2, np.intp(C_lvl2_crd[np.uintp(C_q1 * 2 + C_last_c2)]) - C_last_c2) == 1 - C_gap2:
                                                C_lvl2_crd[np.uintp(C_q1 * 2 + (1 - C_gap2))] = np.intp(C_lvl2_crd[np.uintp(C_q1 * 2 + C_last_c2)])
                                                C_last_c2 = C_last_c2 - 1
                                            else:
                                                C_lvl2_crd[np.uintp(C_q1 * 2 + (1 - C_gap2))] = 1 - C_gap2
                                    C_last_c2 = 0
                                if emit == 2:
                                    pass
                                elif emit:
                                    if C_last_c2 < 2:
                                        C_lvl2_crd[np.uintp(C_q1 * 2 + C_last_c2)] = C_c2
                                elif C_last_c2 == 2 and C_n2 == 0:
                                    C_n2 = C_q1 + 1
                                C_gap2 = C_last_c2 + min(2 - C_n2, C_c2 - C_last_c2)
                                C_last_c2 += 1
                                C_q2 = C_q1 * 2 + C_gap2
                                if emit == 2:
                                    C_vals[np.uintp(C_q2)] = C_v
        if emit == 0:
            C_counts[np.uintp(C_chunk), 2] = C_n2
    if emit == 0:
        C_refused2 = 0
        for C_row2 in range(C_chunks):
            if C_refused2 != 0:
                C_counts[np.uintp(C_row2), 2] = 0
            else:
                C_refused2 = C_counts[np.uintp(C_row2), 2]
    return 0


@njit(cache=True, nogil=True)
def kernel_0_serial(emit, C_lvl1_size, C_lvl2_crd, C_vals, C_counts, A_lvl1_size, A_lvl2_crd, A_vals, B, D, n_i, n_j, n_k):
    """C[i, j] = A[i, j] * B[i, k] * D[k, j] (serial: for small operands)"""
    C_first = 0
    C_span = max(np.intp(n_i) - C_first, 0)
    C_chunks = min(C_span, len(C_counts))
    for C_chunk in range(C_chunks):
        C_lo = C_first + C_span * C_chunk // C_chunks
        C_hi = C_first + C_span * (C_chunk + 1) // C_chunks
        C_n2 = C_counts[np.uintp(C_chunk), 2] if emit else 0
        C_last_p2 = -1
        C_last_c2 = 0
        for i in range(C_lo, C_hi):
            for v_j_div4 in range(A_lvl1_size):
                A_p1 = i * A_lvl1_size + v_j_div4
                for A_p2 in range(A_p1 * 2, A_p1 * 2 + 2):
                    v_j_mod4 = np.intp(A_lvl2_crd[np.uintp(A_p2)])
                    j = 4 * v_j_div4 + v_j_mod4
                    if 0 <= j and j < n_j:
                        acc = 0.0
                        found = False
                        k_start = 0
                        k_stop = n_k
                        if k_stop - k_start >= 16:
                            k_mid = k_start + (k_stop - k_start & -2)
                            acc_1 = 0.0
                            for k_2 in range(k_start, k_mid, 2):
                                k = k_2
                                found = True
                                acc += A_vals[np.uintp(A_p2)] * B[np.uintp(i), np.uintp(k)] * D[np.uintp(k), np.uintp(j)]
                                k = k_2 + 1
                                found = True
                                acc_1 += A_vals[np.uintp(A_p2)] * B[np.uintp(i), np.uintp(k)] * D[np.uintp(k), np.uintp(j)]
                            for k in range(k_mid, k_stop):
                                found = True
                                acc += A_vals[np.uintp(A_p2)] * B[np.uintp(i), np.uintp(k)] * D[np.uintp(k), np.uintp(j)]
                            acc += acc_1
                        else:
                            for k in range(k_start, k_stop):
                                found = True
                                acc += A_vals[np.uintp(A_p2)] * B[np.uintp(i), np.uintp(k)] * D[np.uintp(k), np.uintp(j)]
                        if found:
                            C_v = acc
                            if C_v != 0:
                                C_c1 = j // 4
                                C_q1 = i * C_lvl1_size + C_c1
                                C_c2 = j % 4
                                if C_last_p2 != C_q1:
                                    C_last_p2 = C_q1
                                    if emit == 2:
                                        C_n2 = 1
                                        while C_n2 < 2 and np.intp(C_lvl2_crd[np.uintp(C_q1 * 2 + C_n2)]) > np.intp(C_lvl2_crd[np.uintp(C_q1 * 2 + (C_n2 - 1))]):
                                            C_n2 += 1
                                        C_last_c2 = C_n2 - 1
                                        for C_gap2 in range(2):
                                            if C_last_c2 >= 0 and C_last_c2 + min(2 - C_n2, np.intp(C_lvl2_crd[np.uintp(C_q1 * 2 + C_last_c2)]) - C_last_c2) == 1 - C_gap2:
                                                C_lvl2_crd[np.uintp(C_q1 * 2 + (1 - C_gap2))] = np.intp(C_lvl2_crd[np.uintp(C_q1 * 2 + C_last_c2)])
                                                C_last_c2 = C_last_c2 - 1
                                            else:
                                                C_lvl2_crd[np.uintp(C_q1 * 2 + (1 - C_gap2))] = 1 - C_gap2
                                    C_last_c2 = 0
                                if emit == 2:
                                    pass
                                elif emit:
                                    if C_last_c2 < 2:
                                        C_lvl2_crd[np.uintp(C_q1 * 2 + C_last_c2)] = C_c2
                                elif C_last_c2 == 2 and C_n2 == 0:
                                    C_n2 = C_q1 + 1
                                C_gap2 = C_last_c2 + min(2 - C_n2, C_c2 - C_last_c2)
                                C_last_c2 += 1
                                C_q2 = C_q1 * 2 + C_gap2
                                if emit == 2:
                                    C_vals[np.uintp(C_q2)] = C_v
        if emit == 0:
            C_counts[np.uintp(C_chunk), 2] = C_n2
    if emit == 0:
        C_refused2 = 0
        for C_row2 in range(C_chunks):
            if C_refused2 != 0:
                C_counts[np.uintp(C_row2), 2] = 0
            else:
                C_refused2 = C_counts[np.uintp(C_row2), 2]
    return 0


PLAN = [{'function': 'kernel_0', 'params': [['emit'], ['out_size', 'C', 1], ['out_level', 'C', 2, 'crd'], ['out_vals', 'C'], ['out_counts', 'C'], ['size', 'A', 1], ['crd', 'A', 2], ['vals', 'A'], ['array', 'B'], ['array', 'D'], ['extent', 'i'], ['extent', 'j'], ['extent', 'k']], 'convert': {}, 'alias': {}, 'order': ['i', 'v_j_div4', 'v_j_mod4', 'k'], 'sparse_output': True, 'rows': None, 'statement': 'C[i, j] = A[i, j] * B[i, k] * D[k, j]', 'accumulate': False, 'overwrites': False, 'writer': 3, 'workspace': None, 'split': True}]
