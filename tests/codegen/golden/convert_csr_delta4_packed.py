# golden file: B[i, j] = A[i, j]

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True)
def kernel_0(emit, B_lvl1_pos, B_lvl1_crd, B_vals, B_counts, A_lvl1_pos, A_lvl1_crd, A_vals, n_i):
    """B[i, j] = A[i, j]"""
    B_n1 = 0
    B_last_p1 = -1
    B_last_c1 = 0
    for i in range(n_i):
        for A_p1 in range(np.intp(A_lvl1_pos[np.uintp(i)]), np.intp(A_lvl1_pos[np.uintp(i + 1)])):
            j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
            B_v = A_vals[np.uintp(A_p1)]
            if B_v != 0:
                if B_last_p1 != i or B_last_c1 != j:
                    B_gap1 = j - (-1 if B_last_p1 != i else B_last_c1) - 1
                    while B_gap1 >= 16:
                        if emit:
                            B_lvl1_crd[np.uintp(B_n1 * 4 >> 5)] = B_lvl1_crd[np.uintp(B_n1 * 4 >> 5)] | 15 << (B_n1 * 4 & 31)
                        B_n1 += 1
                        B_gap1 = B_gap1 - 16
                    if emit:
                        B_lvl1_crd[np.uintp(B_n1 * 4 >> 5)] = B_lvl1_crd[np.uintp(B_n1 * 4 >> 5)] | B_gap1 << (B_n1 * 4 & 31)
                        B_lvl1_pos[np.uintp(i + 1)] = B_n1 + 1
                    B_n1 += 1
                    B_last_p1 = i
                    B_last_c1 = j
                B_q1 = B_n1 - 1
                if emit:
                    B_vals[np.uintp(B_q1)] = B_v
    B_counts[1] = B_n1
    return 0


PLAN = [{'function': 'kernel_0', 'params': [['emit'], ['out_level', 'B', 1, 'pos'], ['out_level', 'B', 1, 'crd'], ['out_vals', 'B'], ['out_counts', 'B'], ['pos', 'A', 1], ['crd', 'A', 1], ['vals', 'A'], ['extent', 'i']], 'convert': {}, 'alias': {}, 'order': ['i', 'j'], 'sparse_output': True, 'rows': None, 'statement': 'B[i, j] = A[i, j]', 'accumulate': False, 'overwrites': False, 'writer': 2, 'workspace': None}]
