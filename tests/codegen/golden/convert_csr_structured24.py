# golden file: B[i, j] = A[i, j]

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True)
def kernel_0(emit, B_lvl1_size, B_lvl2_crd, B_vals, B_counts, A_lvl1_pos, A_lvl1_crd, A_vals, n_i):
    """B[i, j] = A[i, j]"""
    B_n2 = 0
    B_last_p2 = -1
    B_last_c2 = 0
    for i in range(n_i):
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
    B_counts[2] = B_n2
    return 0


PLAN = [{'function': 'kernel_0', 'params': [['emit'], ['out_size', 'B', 1], ['out_level', 'B', 2, 'crd'], ['out_vals', 'B'], ['out_counts', 'B'], ['pos', 'A', 1], ['crd', 'A', 1], ['vals', 'A'], ['extent', 'i']], 'convert': {}, 'alias': {}, 'order': ['i', 'j'], 'sparse_output': True, 'rows': None, 'statement': 'B[i, j] = A[i, j]', 'accumulate': False, 'overwrites': False, 'writer': 3, 'workspace': None}]
