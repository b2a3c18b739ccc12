# golden file: B[i, j] = A[i, j]

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True)
def kernel_0(emit, B_lvl0_pos, B_lvl0_crd, B_lvl0_lo, B_lvl0_work, B_vals, B_counts, A_lvl0_pos, A_lvl0_crd, A_lvl1_crd, A_vals, n_i):
    """B[i, j] = A[i, j]"""
    B_n0 = 0
    B_last_p0 = -1
    B_last_c0 = 0
    A_p0 = np.intp(A_lvl0_pos[0])
    A_p0_end = np.intp(A_lvl0_pos[1])
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
                B_c0 = j - i
                if emit == 2:
                    if B_last_p0 != 0:
                        B_last_p0 = 0
                        if np.intp(B_lvl0_pos[1]) - np.intp(B_lvl0_pos[0]) <= 32:
                            for B_gap0 in range(np.intp(B_lvl0_pos[0]) + 1, np.intp(B_lvl0_pos[1])):
                                B_key0 = B_lvl0_crd[np.uintp(B_gap0)]
                                B_hole0 = B_gap0 - 1
                                while B_hole0 >= np.intp(B_lvl0_pos[0]) and B_lvl0_crd[np.uintp(B_hole0)] > B_key0:
                                    B_lvl0_crd[np.uintp(B_hole0 + 1)] = B_lvl0_crd[np.uintp(B_hole0)]
                                    B_hole0 = B_hole0 - 1
                                B_lvl0_crd[np.uintp(B_hole0 + 1)] = B_key0
                        else:
                            B_lvl0_crd[np.intp(B_lvl0_pos[0]):np.intp(B_lvl0_pos[1])].sort()
                        for B_gap0 in range(np.intp(B_lvl0_pos[0]), np.intp(B_lvl0_pos[1])):
                            B_lvl0_work[np.uintp(np.intp(B_lvl0_crd[np.uintp(B_gap0)]) - B_lvl0_lo)] = B_gap0
                elif B_lvl0_work[np.uintp(B_c0 - B_lvl0_lo)] != 0:
                    B_lvl0_work[np.uintp(B_c0 - B_lvl0_lo)] = 0
                    if emit:
                        B_lvl0_crd[np.uintp(B_n0)] = B_c0
                        B_last_p0 = 0
                    B_n0 += 1
                B_q0 = B_lvl0_work[np.uintp(B_c0 - B_lvl0_lo)]
                B_q1 = B_q0 * n_i + i
                if emit == 2:
                    B_vals[np.uintp(B_q1)] = B_v
        A_p0 = A_r0
    B_counts[0] = B_n0
    return 0


PLAN = [{'function': 'kernel_0', 'params': [['emit'], ['out_level', 'B', 0, 'pos'], ['out_level', 'B', 0, 'crd'], ['out_lo', 'B', 0], ['out_work', 'B', 0], ['out_vals', 'B'], ['out_counts', 'B'], ['pos', 'A', 0], ['crd', 'A', 0], ['crd', 'A', 1], ['vals', 'A'], ['extent', 'i']], 'convert': {}, 'alias': {}, 'order': ['i', 'j'], 'sparse_output': True, 'rows': None, 'statement': 'B[i, j] = A[i, j]', 'accumulate': False, 'overwrites': False, 'writer': 3, 'workspace': None}]
