# golden file: y[i] = magnitude#golden0magni(A[i, j]) * x[j] [epilog relu#golden0relu]

import numpy as np
from numba import njit, prange

from ustc.codegen.functions import resolve as _ustc_function

magnitude_golden0mag = _ustc_function("golden0magnitude", "cpu")
relu_golden0rel = _ustc_function("golden0relu", "cpu")


@njit(cache=True, nogil=True, parallel=True)
def kernel_0(y, A_lvl0_pos, A_lvl0_crd, A_lvl1_pos, A_lvl1_crd, A_vals, x):
    """y[i] = magnitude#golden0magni(A[i, j]) * x[j] [epilog relu#golden0relu]"""
    for A_p0_u in prange(np.intp(A_lvl0_pos[0]), np.intp(A_lvl0_pos[1])):
        A_p0 = np.intp(A_p0_u)
        i = np.intp(A_lvl0_crd[np.uintp(A_p0)])
        acc = 0.0
        A_p1_start = np.intp(A_lvl1_pos[np.uintp(A_p0)])
        A_p1_stop = np.intp(A_lvl1_pos[np.uintp(A_p0 + 1)])
        if A_p1_stop - A_p1_start >= 16:
            A_p1_mid = A_p1_start + (A_p1_stop - A_p1_start & -2)
            acc_1 = 0.0
            for A_p1_2 in range(A_p1_start, A_p1_mid, 2):
                A_p1 = A_p1_2
                j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                acc += magnitude_golden0mag(A_vals[np.uintp(A_p1)]) * x[np.uintp(j)]
                A_p1 = A_p1_2 + 1
                j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                acc_1 += magnitude_golden0mag(A_vals[np.uintp(A_p1)]) * x[np.uintp(j)]
            for A_p1 in range(A_p1_mid, A_p1_stop):
                j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                acc += magnitude_golden0mag(A_vals[np.uintp(A_p1)]) * x[np.uintp(j)]
            acc += acc_1
        else:
            for A_p1 in range(A_p1_start, A_p1_stop):
                j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                acc += magnitude_golden0mag(A_vals[np.uintp(A_p1)]) * x[np.uintp(j)]
        y[np.uintp(i)] += acc


@njit(cache=True, nogil=True)
def kernel_0_serial(y, A_lvl0_pos, A_lvl0_crd, A_lvl1_pos, A_lvl1_crd, A_vals, x):
    """y[i] = magnitude#golden0magni(A[i, j]) * x[j] [epilog relu#golden0relu] (serial: for small operands)"""
    for A_p0 in range(np.intp(A_lvl0_pos[0]), np.intp(A_lvl0_pos[1])):
        i = np.intp(A_lvl0_crd[np.uintp(A_p0)])
        acc = 0.0
        A_p1_start = np.intp(A_lvl1_pos[np.uintp(A_p0)])
        A_p1_stop = np.intp(A_lvl1_pos[np.uintp(A_p0 + 1)])
        if A_p1_stop - A_p1_start >= 16:
            A_p1_mid = A_p1_start + (A_p1_stop - A_p1_start & -2)
            acc_1 = 0.0
            for A_p1_2 in range(A_p1_start, A_p1_mid, 2):
                A_p1 = A_p1_2
                j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                acc += magnitude_golden0mag(A_vals[np.uintp(A_p1)]) * x[np.uintp(j)]
                A_p1 = A_p1_2 + 1
                j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                acc_1 += magnitude_golden0mag(A_vals[np.uintp(A_p1)]) * x[np.uintp(j)]
            for A_p1 in range(A_p1_mid, A_p1_stop):
                j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                acc += magnitude_golden0mag(A_vals[np.uintp(A_p1)]) * x[np.uintp(j)]
            acc += acc_1
        else:
            for A_p1 in range(A_p1_start, A_p1_stop):
                j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                acc += magnitude_golden0mag(A_vals[np.uintp(A_p1)]) * x[np.uintp(j)]
        y[np.uintp(i)] += acc


@njit(cache=True, nogil=True, parallel=True)
def kernel_0_epilog(vals):
    """epilog of y[i] = magnitude#golden0magni(A[i, j]) * x[j] [epilog relu#golden0relu]"""
    n_e = len(vals)
    for e_u in prange(n_e):
        e = np.intp(e_u)
        vals[np.uintp(e)] = relu_golden0rel(vals[np.uintp(e)])


@njit(cache=True, nogil=True)
def kernel_0_epilog_serial(vals):
    """epilog of y[i] = magnitude#golden0magni(A[i, j]) * x[j] [epilog relu#golden0relu] (serial: for small operands)"""
    n_e = len(vals)
    for e in range(n_e):
        vals[np.uintp(e)] = relu_golden0rel(vals[np.uintp(e)])


PLAN = [{'function': 'kernel_0', 'params': [['array', 'y'], ['pos', 'A', 0], ['crd', 'A', 0], ['pos', 'A', 1], ['crd', 'A', 1], ['vals', 'A'], ['array', 'x']], 'convert': {}, 'alias': {}, 'order': ['i', 'j'], 'sparse_output': False, 'rows': None, 'statement': 'y[i] = magnitude#golden0magni(A[i, j]) * x[j] [epilog relu#golden0relu]', 'accumulate': False, 'overwrites': False, 'writer': 0, 'workspace': None, 'epilog': 'kernel_0_epilog'}]
