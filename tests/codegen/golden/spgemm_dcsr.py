# golden file: C[i, j] = A[i, k] * B[k, j]

import numpy as np
from numba import njit, prange

from ustc.kernels._alloc import empty as _ustc_empty


@njit(cache=True, nogil=True)
def kernel_0(emit, C_lvl0_crd, C_lvl1_pos, C_lvl1_crd, C_vals, C_counts, A_lvl0_pos, A_lvl0_crd, A_lvl1_pos, A_lvl1_crd, A_vals, B_lvl0_pos, B_lvl0_crd, B_lvl1_pos, B_lvl1_crd, B_vals, n_j):
    """C[i, j] = A[i, k] * B[k, j]"""
    C_n0 = 0
    C_last_p0 = -1
    C_last_c0 = 0
    C_n1 = 0
    C_last_p1 = -1
    C_last_c1 = 0
    ws_j_vals = _ustc_empty(n_j, np.float64)
    ws_j_mark = np.zeros(n_j, dtype=np.bool_)
    ws_j_list = _ustc_empty(n_j, np.intp)
    ws_j_spare = _ustc_empty(n_j, np.intp)
    ws_j_bin = _ustc_empty(n_j + 1, np.intp)
    for A_p0 in range(np.intp(A_lvl0_pos[0]), np.intp(A_lvl0_pos[1])):
        i = np.intp(A_lvl0_crd[np.uintp(A_p0)])
        ws_j_n = 0
        A_p1 = np.intp(A_lvl1_pos[np.uintp(A_p0)])
        A_p1_end = np.intp(A_lvl1_pos[np.uintp(A_p0 + 1)])
        B_p0 = np.intp(B_lvl0_pos[0])
        B_p0_end = np.intp(B_lvl0_pos[1])
        while A_p1 < A_p1_end and B_p0 < B_p0_end:
            A_c1 = np.intp(A_lvl1_crd[np.uintp(A_p1)])
            B_c0 = np.intp(B_lvl0_crd[np.uintp(B_p0)])
            if A_c1 < B_c0:
                A_p1_lo = A_p1 + 1
                A_p1_hi = A_p1_lo
                A_p1_step = 1
                while A_p1_hi < A_p1_end and np.intp(A_lvl1_crd[np.uintp(A_p1_hi)]) < B_c0:
                    A_p1_lo = A_p1_hi + 1
                    A_p1_hi += A_p1_step
                    A_p1_step *= 2
                A_p1_hi = min(A_p1_hi, A_p1_end)
                while A_p1_lo < A_p1_hi:
                    A_p1_mid = A_p1_lo + A_p1_hi >> 1
                    if np.intp(A_lvl1_crd[np.uintp(A_p1_mid)]) < B_c0:
                        A_p1_lo = A_p1_mid + 1
                    else:
                        A_p1_hi = A_p1_mid
                A_p1 = A_p1_lo
            elif B_c0 < A_c1:
                B_p0_lo = B_p0 + 1
                B_p0_hi = B_p0_lo
                B_p0_step = 1
                while B_p0_hi < B_p0_end and np.intp(B_lvl0_crd[np.uintp(B_p0_hi)]) < A_c1:
                    B_p0_lo = B_p0_hi + 1
                    B_p0_hi += B_p0_step
                    B_p0_step *= 2
                B_p0_hi = min(B_p0_hi, B_p0_end)
                while B_p0_lo < B_p0_hi:
                    B_p0_mid = B_p0_lo + B_p0_hi >> 1
                    if np.intp(B_lvl0_crd[np.uintp(B_p0_mid)]) < A_c1:
                        B_p0_lo = B_p0_mid + 1
                    else:
                        B_p0_hi = B_p0_mid
                B_p0 = B_p0_lo
            else:
                k = A_c1
                for B_p1 in range(np.intp(B_lvl1_pos[np.uintp(B_p0)]), np.intp(B_lvl1_pos[np.uintp(B_p0 + 1)])):
                    j = np.intp(B_lvl1_crd[np.uintp(B_p1)])
                    if ws_j_mark[np.uintp(j)]:
                        ws_j_vals[np.uintp(j)] += A_vals[np.uintp(A_p1)] * B_vals[np.uintp(B_p1)]
                    else:
                        ws_j_mark[np.uintp(j)] = True
                        ws_j_list[np.uintp(ws_j_n)] = j
                        ws_j_n += 1
                        ws_j_vals[np.uintp(j)] = A_vals[np.uintp(A_p1)] * B_vals[np.uintp(B_p1)]
                A_p1 += 1
                B_p0 += 1
        if emit:
            if ws_j_n <= 48:
                for ws_j_t in range(1, ws_j_n):
                    ws_j_key = ws_j_list[np.uintp(ws_j_t)]
                    ws_j_q = ws_j_t - 1
                    while ws_j_q >= 0 and ws_j_list[np.uintp(ws_j_q)] > ws_j_key:
                        ws_j_list[np.uintp(ws_j_q + 1)] = ws_j_list[np.uintp(ws_j_q)]
                        ws_j_q = ws_j_q - 1
                    ws_j_list[np.uintp(ws_j_q + 1)] = ws_j_key
            else:
                # a long row: read off the marks when dense in its span, else bucketed by high bits
                ws_j_min = ws_j_list[0]
                ws_j_max = ws_j_min
                for ws_j_t in range(1, ws_j_n):
                    ws_j_key = ws_j_list[np.uintp(ws_j_t)]
                    ws_j_min = min(ws_j_min, ws_j_key)
                    ws_j_max = max(ws_j_max, ws_j_key)
                if ws_j_max - ws_j_min < ws_j_n * 4:
                    ws_j_q = 0
                    for ws_j_key in range(ws_j_min, ws_j_max + 1):
                        if ws_j_mark[np.uintp(ws_j_key)]:
                            ws_j_list[np.uintp(ws_j_q)] = ws_j_key
                            ws_j_q += 1
                else:
                    ws_j_shift = 0
                    while ws_j_max - ws_j_min >> ws_j_shift >= ws_j_n:
                        ws_j_shift += 1
                    ws_j_bins = (ws_j_max - ws_j_min >> ws_j_shift) + 1
                    for ws_j_t in range(ws_j_bins + 1):
                        ws_j_bin[np.uintp(ws_j_t)] = 0
                    for ws_j_t in range(ws_j_n):
                        ws_j_bin[np.uintp((ws_j_list[np.uintp(ws_j_t)] - ws_j_min >> ws_j_shift) + 1)] += 1
                    ws_j_fullest = 0
                    for ws_j_t in range(ws_j_bins):
                        ws_j_fullest = max(ws_j_fullest, ws_j_bin[np.uintp(ws_j_t + 1)])
                        ws_j_bin[np.uintp(ws_j_t + 1)] += ws_j_bin[np.uintp(ws_j_t)]
                    for ws_j_t in range(ws_j_n):
                        ws_j_key = ws_j_list[np.uintp(ws_j_t)]
                        ws_j_q = ws_j_key - ws_j_min >> ws_j_shift
                        ws_j_spare[np.uintp(ws_j_bin[np.uintp(ws_j_q)])] = ws_j_key
                        ws_j_bin[np.uintp(ws_j_q)] += 1
                    if ws_j_fullest <= 32:
                        for ws_j_t in range(1, ws_j_n):
                            ws_j_key = ws_j_spare[np.uintp(ws_j_t)]
                            ws_j_q = ws_j_t - 1
                            while ws_j_q >= 0 and ws_j_spare[np.uintp(ws_j_q)] > ws_j_key:
                                ws_j_spare[np.uintp(ws_j_q + 1)] = ws_j_spare[np.uintp(ws_j_q)]
                                ws_j_q = ws_j_q - 1
                            ws_j_spare[np.uintp(ws_j_q + 1)] = ws_j_key
                    else:
                        ws_j_spare[0:ws_j_n].sort()
                    for ws_j_t in range(ws_j_n):
                        ws_j_list[np.uintp(ws_j_t)] = ws_j_spare[np.uintp(ws_j_t)]
        for ws_j_t in range(ws_j_n):
            j = ws_j_list[np.uintp(ws_j_t)]
            ws_j_v = ws_j_vals[np.uintp(j)]
            ws_j_mark[np.uintp(j)] = False
            C_v = ws_j_v
            if C_v != 0:
                if C_last_p0 != 0 or C_last_c0 != i:
                    if emit:
                        C_lvl0_crd[np.uintp(C_n0)] = i
                    C_n0 += 1
                    C_last_p0 = 0
                    C_last_c0 = i
                C_q0 = C_n0 - 1
                if C_last_p1 != C_q0 or C_last_c1 != j:
                    if emit:
                        C_lvl1_crd[np.uintp(C_n1)] = j
                        C_lvl1_pos[np.uintp(C_q0 + 1)] = C_n1 + 1
                    C_n1 += 1
                    C_last_p1 = C_q0
                    C_last_c1 = j
                C_q1 = C_n1 - 1
                if emit:
                    C_vals[np.uintp(C_q1)] = C_v
    C_counts[0] = C_n0
    C_counts[1] = C_n1
    return 0


PLAN = [{'function': 'kernel_0', 'params': [['emit'], ['out_level', 'C', 0, 'crd'], ['out_level', 'C', 1, 'pos'], ['out_level', 'C', 1, 'crd'], ['out_vals', 'C'], ['out_counts', 'C'], ['pos', 'A', 0], ['crd', 'A', 0], ['pos', 'A', 1], ['crd', 'A', 1], ['vals', 'A'], ['pos', 'B', 0], ['crd', 'B', 0], ['pos', 'B', 1], ['crd', 'B', 1], ['vals', 'B'], ['extent', 'j']], 'convert': {}, 'alias': {}, 'order': ['i', 'k', 'j'], 'sparse_output': True, 'rows': None, 'statement': 'C[i, j] = A[i, k] * B[k, j]', 'accumulate': False, 'overwrites': False, 'writer': 2, 'workspace': 'j'}]
