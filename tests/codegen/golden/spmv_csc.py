# golden file: y[i] += A[i, j] * x[j]

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True)
def kernel_0(y, A_lvl1_pos, A_lvl1_crd, A_vals, x, n_j):
    """y[i] += A[i, j] * x[j]"""
    for j in range(n_j):
        for A_p1 in range(np.intp(A_lvl1_pos[np.uintp(j)]), np.intp(A_lvl1_pos[np.uintp(j + 1)])):
            i = np.intp(A_lvl1_crd[np.uintp(A_p1)])
            y[np.uintp(i)] += A_vals[np.uintp(A_p1)] * x[np.uintp(j)]


PLAN = [{'function': 'kernel_0', 'params': [['array', 'y'], ['pos', 'A', 1], ['crd', 'A', 1], ['vals', 'A'], ['array', 'x'], ['extent', 'j']], 'convert': {}, 'alias': {}, 'order': ['j', 'i'], 'sparse_output': False, 'rows': None, 'statement': 'y[i] += A[i, j] * x[j]', 'accumulate': True, 'overwrites': False, 'writer': 0, 'workspace': None}]
