# golden file: B[i, j] = A[i, j]

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True)
def kernel_0(emit, B_lvl0_pos, B_lvl0_crd, B_lvl1_crd, B_vals, B_counts, A_lvl1_pos, A_lvl1_crd, A_vals, n_i):
    """B[i, j] = A[i, j]"""
    B_n0 = 0
    B_last_p0 = -1
    B_last_c0 = 0
    B_n1 = 0
    B_last_p1 = -1
    B_last_c1 = 0
    for i in range(n_i):
        for A_p1 in range(np.intp(A_lvl1_pos[np.uintp(i)]), np.intp(A_lvl1_pos[np.uintp(i + 1)])):
            j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
            B_v = A_vals[np.uintp(A_p1)]
            if B_v != 0:
                if emit:
                    B_lvl0_crd[np.uintp(B_n0)] = i
                    B_lvl0_pos[1] = B_n0 + 1
                B_n0 += 1
                B_last_p0 = 0
                B_last_c0 = i
                B_q0 = B_n0 - 1
                if emit:
                    B_lvl1_crd[np.uintp(B_q0)] = j
                if emit:
                    B_vals[np.uintp(B_q0)] = B_v
    B_counts[0] = B_n0
    B_counts[1] = B_n1
    return 0


PLAN = [{'function': 'kernel_0', 'params': [['emit'], ['out_level', 'B', 0, 'pos'], ['out_level', 'B', 0, 'crd'], ['out_level', 'B', 1, 'crd'], ['out_vals', 'B'], ['out_counts', 'B'], ['pos', 'A', 1], ['crd', 'A', 1], ['vals', 'A'], ['extent', 'i']], 'convert': {}, 'alias': {}, 'order': ['i', 'j'], 'sparse_output': True, 'rows': None, 'statement': 'B[i, j] = A[i, j]', 'accumulate': False, 'overwrites': False, 'writer': 2, 'workspace': None}]
