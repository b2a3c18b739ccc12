# golden file: C[i, j] = A[i, j] * B[i, k] * D[k, j]

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True, parallel=True)
def kernel_0(emit, C_crd0, C_crd1, C_vals, C_offsets, A_lvl1_size, A_lvl2_crd, A_vals, B, D, n_i, n_j, n_k):
    """C[i, j] = A[i, j] * B[i, k] * D[k, j]"""
    C_cap = len(C_vals)
    for i_u in prange(n_i):
        i = np.intp(i_u)
        C_n = C_offsets[np.uintp(i)] if emit else 0
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
                        if emit and C_n < C_cap:
                            C_crd0[np.uintp(C_n)] = i
                            C_crd1[np.uintp(C_n)] = j
                            C_vals[np.uintp(C_n)] = acc
                        C_n += 1
        if emit != 1:
            C_offsets[np.uintp(i + 1)] = C_n


@njit(cache=True, nogil=True)
def kernel_0_serial(emit, C_crd0, C_crd1, C_vals, C_offsets, A_lvl1_size, A_lvl2_crd, A_vals, B, D, n_i, n_j, n_k):
    """C[i, j] = A[i, j] * B[i, k] * D[k, j] (serial: for small operands)"""
    C_cap = len(C_vals)
    for i in range(n_i):
        C_n = C_offsets[np.uintp(i)] if emit else 0
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
                        if emit and C_n < C_cap:
                            C_crd0[np.uintp(C_n)] = i
                            C_crd1[np.uintp(C_n)] = j
                            C_vals[np.uintp(C_n)] = acc
                        C_n += 1
        if emit != 1:
            C_offsets[np.uintp(i + 1)] = C_n


PLAN = [{'function': 'kernel_0', 'params': [['emit'], ['out_crd', 'C', 0], ['out_crd', 'C', 1], ['out_vals', 'C'], ['out_offsets', 'C'], ['size', 'A', 1], ['crd', 'A', 2], ['vals', 'A'], ['array', 'B'], ['array', 'D'], ['extent', 'i'], ['extent', 'j'], ['extent', 'k']], 'convert': {}, 'alias': {}, 'order': ['i', 'v_j_div4', 'v_j_mod4', 'k'], 'sparse_output': True, 'rows': 'i', 'statement': 'C[i, j] = A[i, j] * B[i, k] * D[k, j]', 'accumulate': False, 'overwrites': False, 'writer': 0, 'workspace': None}]
