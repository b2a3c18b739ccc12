# golden file: y[i] += A[i, j] * x[j]

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True, parallel=True)
def kernel_0(y, A_lvl0_pos, A_lvl0_crd, A_lvl1_crd, A_vals, x):
    """y[i] += A[i, j] * x[j]"""
    A_p0_lo = np.intp(A_lvl0_pos[0])
    A_p0_hi = np.intp(A_lvl0_pos[1])
    for A_chunk0_u in prange(256):
        A_chunk0 = np.intp(A_chunk0_u)
        A_p0_a = A_p0_lo + (A_p0_hi - A_p0_lo) * A_chunk0 // 256
        while A_p0_a > A_p0_lo and A_p0_a < A_p0_hi and np.intp(A_lvl0_crd[np.uintp(A_p0_a)]) == np.intp(A_lvl0_crd[np.uintp(A_p0_a - 1)]):
            A_p0_a += 1
        A_p0_b = A_p0_lo + (A_p0_hi - A_p0_lo) * (A_chunk0 + 1) // 256
        while A_p0_b > A_p0_lo and A_p0_b < A_p0_hi and np.intp(A_lvl0_crd[np.uintp(A_p0_b)]) == np.intp(A_lvl0_crd[np.uintp(A_p0_b - 1)]):
            A_p0_b += 1
        for A_p0 in range(A_p0_a, A_p0_b):
            i = np.intp(A_lvl0_crd[np.uintp(A_p0)])
            acc = 0.0
            A_p1 = A_p0
            j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
            acc += A_vals[np.uintp(A_p1)] * x[np.uintp(j)]
            y[np.uintp(i)] += acc


@njit(cache=True, nogil=True)
def kernel_0_serial(y, A_lvl0_pos, A_lvl0_crd, A_lvl1_crd, A_vals, x):
    """y[i] += A[i, j] * x[j] (serial: for small operands)"""
    A_p0_lo = np.intp(A_lvl0_pos[0])
    A_p0_hi = np.intp(A_lvl0_pos[1])
    for A_chunk0 in range(256):
        A_p0_a = A_p0_lo + (A_p0_hi - A_p0_lo) * A_chunk0 // 256
        while A_p0_a > A_p0_lo and A_p0_a < A_p0_hi and np.intp(A_lvl0_crd[np.uintp(A_p0_a)]) == np.intp(A_lvl0_crd[np.uintp(A_p0_a - 1)]):
            A_p0_a += 1
        A_p0_b = A_p0_lo + (A_p0_hi - A_p0_lo) * (A_chunk0 + 1) // 256
        while A_p0_b > A_p0_lo and A_p0_b < A_p0_hi and np.intp(A_lvl0_crd[np.uintp(A_p0_b)]) == np.intp(A_lvl0_crd[np.uintp(A_p0_b - 1)]):
            A_p0_b += 1
        for A_p0 in range(A_p0_a, A_p0_b):
            i = np.intp(A_lvl0_crd[np.uintp(A_p0)])
            acc = 0.0
            A_p1 = A_p0
            j = np.intp(A_lvl1_crd[np.uintp(A_p1)])
            acc += A_vals[np.uintp(A_p1)] * x[np.uintp(j)]
            y[np.uintp(i)] += acc


PLAN = [{'function': 'kernel_0', 'params': [['array', 'y'], ['pos', 'A', 0], ['crd', 'A', 0], ['crd', 'A', 1], ['vals', 'A'], ['array', 'x']], 'convert': {}, 'alias': {}, 'order': ['i', 'j'], 'sparse_output': False, 'rows': None, 'statement': 'y[i] += A[i, j] * x[j]', 'accumulate': True, 'overwrites': False, 'writer': 0, 'workspace': None}]
