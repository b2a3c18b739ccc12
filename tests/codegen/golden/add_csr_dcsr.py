# golden file: C[i, j] = A[i, j] + B[i, j]

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True)
def kernel_0(emit, C_crd0, C_crd1, C_vals, A_lvl1_pos, A_lvl1_crd, A_vals, B_lvl0_pos, B_lvl0_crd, B_lvl1_pos, B_lvl1_crd, B_vals, n_i):
    """C[i, j] = A[i, j] + B[i, j]"""
    C_cap = len(C_vals)
    C_n = 0
    B_p0 = np.intp(B_lvl0_pos[0])
    B_p0_end = np.intp(B_lvl0_pos[1])
    for i in range(n_i):
        B_here0 = False
        if B_p0 < B_p0_end:
            B_c0 = np.intp(B_lvl0_crd[np.uintp(B_p0)])
            B_here0 = B_c0 == i
        if B_here0:
            A_p1 = np.intp(A_lvl1_pos[np.uintp(i)])
            A_p1_end = np.intp(A_lvl1_pos[np.uintp(i + 1)])
            B_p1 = np.intp(B_lvl1_pos[np.uintp(B_p0)])
            B_p1_end = np.intp(B_lvl1_pos[np.uintp(B_p0 + 1)])
            while A_p1 < A_p1_end and B_p1 < B_p1_end:
                A_c1 = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                B_c1 = np.intp(B_lvl1_crd[np.uintp(B_p1)])
                j = min(A_c1, B_c1)
                A_here1 = A_c1 == j
                B_here1 = B_c1 == j
                if A_here1 and B_here1:
                    if emit and C_n < C_cap:
                        C_crd0[np.uintp(C_n)] = i
                        C_crd1[np.uintp(C_n)] = j
                        C_vals[np.uintp(C_n)] = A_vals[np.uintp(A_p1)] + B_vals[np.uintp(B_p1)]
                    C_n += 1
                elif A_here1:
                    if emit and C_n < C_cap:
                        C_crd0[np.uintp(C_n)] = i
                        C_crd1[np.uintp(C_n)] = j
                        C_vals[np.uintp(C_n)] = A_vals[np.uintp(A_p1)]
                    C_n += 1
                elif B_here1:
                    if emit and C_n < C_cap:
                        C_crd0[np.uintp(C_n)] = i
                        C_crd1[np.uintp(C_n)] = j
                        C_vals[np.uintp(C_n)] = B_vals[np.uintp(B_p1)]
                    C_n += 1
                if A_here1:
                    A_p1 += 1
                if B_here1:
                    B_p1 += 1
            while A_p1 < A_p1_end:
                A_c1 = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                j = A_c1
                if emit and C_n < C_cap:
                    C_crd0[np.uintp(C_n)] = i
                    C_crd1[np.uintp(C_n)] = j
                    C_vals[np.uintp(C_n)] = A_vals[np.uintp(A_p1)]
                C_n += 1
                A_p1 += 1
            while B_p1 < B_p1_end:
                B_c1 = np.intp(B_lvl1_crd[np.uintp(B_p1)])
                j = B_c1
                if emit and C_n < C_cap:
                    C_crd0[np.uintp(C_n)] = i
                    C_crd1[np.uintp(C_n)] = j
                    C_vals[np.uintp(C_n)] = B_vals[np.uintp(B_p1)]
                C_n += 1
                B_p1 += 1
        else:
            for A_p1 in range(np.intp(A_lvl1_pos[np.uintp(i)]), np.intp(A_lvl1_pos[np.uintp(i + 1)])):
                j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                if emit and C_n < C_cap:
                    C_crd0[np.uintp(C_n)] = i
                    C_crd1[np.uintp(C_n)] = j
                    C_vals[np.uintp(C_n)] = A_vals[np.uintp(A_p1)]
                C_n += 1
        if B_here0:
            B_p0 += 1
    return C_n


PLAN = [{'function': 'kernel_0', 'params': [['emit'], ['out_crd', 'C', 0], ['out_crd', 'C', 1], ['out_vals', 'C'], ['pos', 'A', 1], ['crd', 'A', 1], ['vals', 'A'], ['pos', 'B', 0], ['crd', 'B', 0], ['pos', 'B', 1], ['crd', 'B', 1], ['vals', 'B'], ['extent', 'i']], 'convert': {}, 'alias': {}, 'order': ['i', 'j'], 'sparse_output': True, 'rows': None, 'statement': 'C[i, j] = A[i, j] + B[i, j]', 'accumulate': False, 'overwrites': False, 'writer': 0, 'workspace': None}]
