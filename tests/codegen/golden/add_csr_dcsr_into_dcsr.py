# golden file: C[i, j] = A[i, j] + B[i, j]

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True)
def kernel_0(emit, C_lvl0_crd, C_lvl1_pos, C_lvl1_crd, C_vals, C_counts, A_lvl1_pos, A_lvl1_crd, A_vals, B_lvl0_pos, B_lvl0_crd, B_lvl1_pos, B_lvl1_crd, B_vals, n_i):
    """C[i, j] = A[i, j] + B[i, j]"""
    C_n0 = 0
    C_last_p0 = -1
    C_last_c0 = 0
    C_n1 = 0
    C_last_p1 = -1
    C_last_c1 = 0
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
                    C_v = A_vals[np.uintp(A_p1)] + B_vals[np.uintp(B_p1)]
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
                elif A_here1:
                    C_v = A_vals[np.uintp(A_p1)]
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
                elif B_here1:
                    C_v = B_vals[np.uintp(B_p1)]
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
                if A_here1:
                    A_p1 += 1
                if B_here1:
                    B_p1 += 1
            while A_p1 < A_p1_end:
                A_c1 = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                j = A_c1
                C_v = A_vals[np.uintp(A_p1)]
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
                A_p1 += 1
            while B_p1 < B_p1_end:
                B_c1 = np.intp(B_lvl1_crd[np.uintp(B_p1)])
                j = B_c1
                C_v = B_vals[np.uintp(B_p1)]
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
                B_p1 += 1
        else:
            for A_p1 in range(np.intp(A_lvl1_pos[np.uintp(i)]), np.intp(A_lvl1_pos[np.uintp(i + 1)])):
                j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                C_v = A_vals[np.uintp(A_p1)]
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
        if B_here0:
            B_p0 += 1
    C_counts[0] = C_n0
    C_counts[1] = C_n1
    return 0


PLAN = [{'function': 'kernel_0', 'params': [['emit'], ['out_level', 'C', 0, 'crd'], ['out_level', 'C', 1, 'pos'], ['out_level', 'C', 1, 'crd'], ['out_vals', 'C'], ['out_counts', 'C'], ['pos', 'A', 1], ['crd', 'A', 1], ['vals', 'A'], ['pos', 'B', 0], ['crd', 'B', 0], ['pos', 'B', 1], ['crd', 'B', 1], ['vals', 'B'], ['extent', 'i']], 'convert': {}, 'alias': {}, 'order': ['i', 'j'], 'sparse_output': True, 'rows': None, 'statement': 'C[i, j] = A[i, j] + B[i, j]', 'accumulate': False, 'overwrites': False, 'writer': 2, 'workspace': None}]
