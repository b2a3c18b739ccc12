# golden file: Y[i, j] = B[i, k, l] * C[k, j] * D[l, j]

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True, parallel=True)
def kernel_0(Y, B_lvl0_pos, B_lvl0_crd, B_lvl1_pos, B_lvl1_crd, B_lvl2_pos, B_lvl2_crd, B_vals, C, D, n_j):
    """Y[i, j] = B[i, k, l] * C[k, j] * D[l, j]"""
    for B_p0_u in prange(np.intp(B_lvl0_pos[0]), np.intp(B_lvl0_pos[1])):
        B_p0 = np.intp(B_p0_u)
        i = np.intp(B_lvl0_crd[np.uintp(B_p0)])
        for B_p1 in range(np.intp(B_lvl1_pos[np.uintp(B_p0)]), np.intp(B_lvl1_pos[np.uintp(B_p0 + 1)])):
            k = np.intp(B_lvl1_crd[np.uintp(B_p1)])
            for B_p2 in range(np.intp(B_lvl2_pos[np.uintp(B_p1)]), np.intp(B_lvl2_pos[np.uintp(B_p1 + 1)])):
                l = np.intp(B_lvl2_crd[np.uintp(B_p2)])
                for j in range(n_j):
                    Y[np.uintp(i), np.uintp(j)] += B_vals[np.uintp(B_p2)] * C[np.uintp(k), np.uintp(j)] * D[np.uintp(l), np.uintp(j)]


@njit(cache=True, nogil=True)
def kernel_0_serial(Y, B_lvl0_pos, B_lvl0_crd, B_lvl1_pos, B_lvl1_crd, B_lvl2_pos, B_lvl2_crd, B_vals, C, D, n_j):
    """Y[i, j] = B[i, k, l] * C[k, j] * D[l, j] (serial: for small operands)"""
    for B_p0 in range(np.intp(B_lvl0_pos[0]), np.intp(B_lvl0_pos[1])):
        i = np.intp(B_lvl0_crd[np.uintp(B_p0)])
        for B_p1 in range(np.intp(B_lvl1_pos[np.uintp(B_p0)]), np.intp(B_lvl1_pos[np.uintp(B_p0 + 1)])):
            k = np.intp(B_lvl1_crd[np.uintp(B_p1)])
            for B_p2 in range(np.intp(B_lvl2_pos[np.uintp(B_p1)]), np.intp(B_lvl2_pos[np.uintp(B_p1 + 1)])):
                l = np.intp(B_lvl2_crd[np.uintp(B_p2)])
                for j in range(n_j):
                    Y[np.uintp(i), np.uintp(j)] += B_vals[np.uintp(B_p2)] * C[np.uintp(k), np.uintp(j)] * D[np.uintp(l), np.uintp(j)]


PLAN = [{'function': 'kernel_0', 'params': [['array', 'Y'], ['pos', 'B', 0], ['crd', 'B', 0], ['pos', 'B', 1], ['crd', 'B', 1], ['pos', 'B', 2], ['crd', 'B', 2], ['vals', 'B'], ['array', 'C'], ['array', 'D'], ['extent', 'j']], 'convert': {}, 'alias': {}, 'order': ['i', 'k', 'l', 'j'], 'sparse_output': False, 'rows': None, 'statement': 'Y[i, j] = B[i, k, l] * C[k, j] * D[l, j]', 'accumulate': False, 'overwrites': False, 'writer': 0, 'workspace': None}]
