# golden file: y[i] += A[i, j] * x[j]

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True, parallel=True)
def kernel_0(y, A_lvl0_pos, A_lvl0_crd, A_lvl1_size, A_vals, x, n_i, n_j):
    """y[i] += A[i, j] * x[j]"""
    for i_tile_u in prange((n_i + 16383) // 16384):
        i_tile = np.intp(i_tile_u)
        i_tlo = i_tile * 16384
        i_thi = min(i_tlo + 16384, n_i)
        for A_p0 in range(np.intp(A_lvl0_pos[0]), np.intp(A_lvl0_pos[1])):
            v_j_minus_i = np.intp(A_lvl0_crd[np.uintp(A_p0)])
            for i in range(max(i_tlo, max(0, -v_j_minus_i)), min(i_thi, min(n_i, n_j - v_j_minus_i))):
                j = v_j_minus_i + i
                A_p1 = A_p0 * A_lvl1_size + i
                y[np.uintp(i)] += A_vals[np.uintp(A_p1)] * x[np.uintp(j)]


@njit(cache=True, nogil=True)
def kernel_0_serial(y, A_lvl0_pos, A_lvl0_crd, A_lvl1_size, A_vals, x, n_i, n_j):
    """y[i] += A[i, j] * x[j] (serial: for small operands)"""
    for i_tile in range((n_i + 16383) // 16384):
        i_tlo = i_tile * 16384
        i_thi = min(i_tlo + 16384, n_i)
        for A_p0 in range(np.intp(A_lvl0_pos[0]), np.intp(A_lvl0_pos[1])):
            v_j_minus_i = np.intp(A_lvl0_crd[np.uintp(A_p0)])
            for i in range(max(i_tlo, max(0, -v_j_minus_i)), min(i_thi, min(n_i, n_j - v_j_minus_i))):
                j = v_j_minus_i + i
                A_p1 = A_p0 * A_lvl1_size + i
                y[np.uintp(i)] += A_vals[np.uintp(A_p1)] * x[np.uintp(j)]


PLAN = [{'function': 'kernel_0', 'params': [['array', 'y'], ['pos', 'A', 0], ['crd', 'A', 0], ['size', 'A', 1], ['vals', 'A'], ['array', 'x'], ['extent', 'i'], ['extent', 'j']], 'convert': {}, 'alias': {}, 'order': ['v_j_minus_i', 'i'], 'sparse_output': False, 'rows': None, 'statement': 'y[i] += A[i, j] * x[j]', 'accumulate': True, 'overwrites': False, 'writer': 0, 'workspace': None}]
