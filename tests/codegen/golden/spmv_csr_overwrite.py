# golden file: y[i] = A[i, j] * x[j]

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True, parallel=True)
def kernel_0(y, A_lvl1_pos, A_lvl1_crd, A_vals, x, n_i):
    """y[i] = A[i, j] * x[j]"""
    for i_u in prange(n_i):
        i = np.intp(i_u)
        acc = 0.0
        A_p1_start = np.intp(A_lvl1_pos[np.uintp(i)])
        A_p1_stop = np.intp(A_lvl1_pos[np.uintp(i + 1)])
        A_p1_mid = A_p1_start + (A_p1_stop - A_p1_start & -2)
        acc_1 = 0.0
        for A_p1_2 in range(A_p1_start, A_p1_mid, 2):
            A_p1 = A_p1_2
            j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
            acc += A_vals[np.uintp(A_p1)] * x[np.uintp(j)]
            A_p1 = A_p1_2 + 1
            j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
            acc_1 += A_vals[np.uintp(A_p1)] * x[np.uintp(j)]
        for A_p1 in range(A_p1_mid, A_p1_stop):
            j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
            acc += A_vals[np.uintp(A_p1)] * x[np.uintp(j)]
        acc += acc_1
        y[np.uintp(i)] = acc


@njit(cache=True, nogil=True)
def kernel_0_serial(y, A_lvl1_pos, A_lvl1_crd, A_vals, x, n_i):
    """y[i] = A[i, j] * x[j] (serial: for small operands)"""
    for i in range(n_i):
        acc = 0.0
        A_p1_start = np.intp(A_lvl1_pos[np.uintp(i)])
        A_p1_stop = np.intp(A_lvl1_pos[np.uintp(i + 1)])
        A_p1_mid = A_p1_start + (A_p1_stop - A_p1_start & -2)
        acc_1 = 0.0
        for A_p1_2 in range(A_p1_start, A_p1_mid, 2):
            A_p1 = A_p1_2
            j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
            acc += A_vals[np.uintp(A_p1)] * x[np.uintp(j)]
            A_p1 = A_p1_2 + 1
            j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
            acc_1 += A_vals[np.uintp(A_p1)] * x[np.uintp(j)]
        for A_p1 in range(A_p1_mid, A_p1_stop):
            j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
            acc += A_vals[np.uintp(A_p1)] * x[np.uintp(j)]
        acc += acc_1
        y[np.uintp(i)] = acc


PLAN = [{'function': 'kernel_0', 'params': [['array', 'y'], ['pos', 'A', 1], ['crd', 'A', 1], ['vals', 'A'], ['array', 'x'], ['extent', 'i']], 'convert': {}, 'alias': {}, 'order': ['i', 'j'], 'sparse_output': False, 'rows': None, 'statement': 'y[i] = A[i, j] * x[j]', 'accumulate': False, 'overwrites': True, 'writer': 0, 'workspace': None}]
