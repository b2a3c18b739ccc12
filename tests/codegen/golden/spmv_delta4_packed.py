# golden file: y[i] += A[i, j] * x[j]

import numpy as np
from numba import njit, prange

from ustc.kernels._alloc import empty as _ustc_empty


@njit(cache=True, nogil=True, parallel=True)
def kernel_0(y, A_lvl1_pos, A_lvl1_crd, A_vals, x, n_i, n_threads):
    """y[i] += A[i, j] * x[j]"""
    i_rows = max(n_i, 0)
    i_chunks = min(i_rows, n_threads)
    i_border = _ustc_empty(i_chunks + 1, np.intp)
    i_border[0] = 0
    i_border[np.uintp(i_chunks)] = i_rows
    if i_chunks > 1:
        # a row's work is its entries and 1: A_lvl1_pos[r] + r is the work before row r, i_border[c] where chunk c's even share starts
        i_first = np.intp(A_lvl1_pos[0])
        i_total = np.intp(A_lvl1_pos[np.uintp(i_rows)]) + i_rows - i_first
        for i_chunk in range(1, i_chunks):
            i_goal = i_first + i_total * i_chunk // i_chunks
            i_lo = i_border[np.uintp(i_chunk - 1)]
            i_hi = i_rows
            while i_lo < i_hi:
                i_mid = i_lo + i_hi >> 1
                if np.intp(A_lvl1_pos[np.uintp(i_mid)]) + i_mid < i_goal:
                    i_lo = i_mid + 1
                else:
                    i_hi = i_mid
            i_border[np.uintp(i_chunk)] = i_lo
    for i_chunk_u in prange(i_chunks):
        i_chunk = np.intp(i_chunk_u)
        i_end = np.intp(A_lvl1_pos[np.uintp(i_border[np.uintp(i_chunk)])])
        for i in range(i_border[np.uintp(i_chunk)], i_border[np.uintp(i_chunk + 1)]):
            i_begin = i_end
            i_end = np.intp(A_lvl1_pos[np.uintp(i + 1)])
            acc = 0.0
            A_c1 = -1
            A_p1_start = i_begin
            A_p1_stop = i_end
            if A_p1_stop - A_p1_start >= 16:
                A_p1_mid = A_p1_start + (A_p1_stop - A_p1_start & -2)
                acc_1 = 0.0
                for A_p1_2 in range(A_p1_start, A_p1_mid, 2):
                    A_p1 = A_p1_2
                    A_c1 += 1 + (A_lvl1_crd[A_p1 * 4 >> 5] >> (A_p1 * 4 & 31) & 15)
                    j = A_c1
                    acc += A_vals[np.uintp(A_p1)] * x[np.uintp(j)]
                    A_p1 = A_p1_2 + 1
                    A_c1 += 1 + (A_lvl1_crd[A_p1 * 4 >> 5] >> (A_p1 * 4 & 31) & 15)
                    j = A_c1
                    acc_1 += A_vals[np.uintp(A_p1)] * x[np.uintp(j)]
                for A_p1 in range(A_p1_mid, A_p1_stop):
                    A_c1 += 1 + (A_lvl1_crd[A_p1 * 4 >> 5] >> (A_p1 * 4 & 31) & 15)
                    j = A_c1
                    acc += A_vals[np.uintp(A_p1)] * x[np.uintp(j)]
                acc += acc_1
            else:
                for A_p1 in range(A_p1_start, A_p1_stop):
                    A_c1 += 1 + (A_lvl1_crd[A_p1 * 4 >> 5] >> (A_p1 * 4 & 31) & 15)
                    j = A_c1
                    acc += A_vals[np.uintp(A_p1)] * x[np.uintp(j)]
            y[np.uintp(i)] += acc


@njit(cache=True, nogil=True)
def kernel_0_serial(y, A_lvl1_pos, A_lvl1_crd, A_vals, x, n_i, n_threads):
    """y[i] += A[i, j] * x[j] (serial: for small operands)"""
    i_rows = max(n_i, 0)
    i_chunks = min(i_rows, n_threads)
    i_border = _ustc_empty(i_chunks + 1, np.intp)
    i_border[0] = 0
    i_border[np.uintp(i_chunks)] = i_rows
    if i_chunks > 1:
        # a row's work is its entries and 1: A_lvl1_pos[r] + r is the work before row r, i_border[c] where chunk c's even share starts
        i_first = np.intp(A_lvl1_pos[0])
        i_total = np.intp(A_lvl1_pos[np.uintp(i_rows)]) + i_rows - i_first
        for i_chunk in range(1, i_chunks):
            i_goal = i_first + i_total * i_chunk // i_chunks
            i_lo = i_border[np.uintp(i_chunk - 1)]
            i_hi = i_rows
            while i_lo < i_hi:
                i_mid = i_lo + i_hi >> 1
                if np.intp(A_lvl1_pos[np.uintp(i_mid)]) + i_mid < i_goal:
                    i_lo = i_mid + 1
                else:
                    i_hi = i_mid
            i_border[np.uintp(i_chunk)] = i_lo
    for i_chunk in range(i_chunks):
        i_end = np.intp(A_lvl1_pos[np.uintp(i_border[np.uintp(i_chunk)])])
        for i in range(i_border[np.uintp(i_chunk)], i_border[np.uintp(i_chunk + 1)]):
            i_begin = i_end
            i_end = np.intp(A_lvl1_pos[np.uintp(i + 1)])
            acc = 0.0
            A_c1 = -1
            A_p1_start = i_begin
            A_p1_stop = i_end
            if A_p1_stop - A_p1_start >= 16:
                A_p1_mid = A_p1_start + (A_p1_stop - A_p1_start & -2)
                acc_1 = 0.0
                for A_p1_2 in range(A_p1_start, A_p1_mid, 2):
                    A_p1 = A_p1_2
                    A_c1 += 1 + (A_lvl1_crd[A_p1 * 4 >> 5] >> (A_p1 * 4 & 31) & 15)
                    j = A_c1
                    acc += A_vals[np.uintp(A_p1)] * x[np.uintp(j)]
                    A_p1 = A_p1_2 + 1
                    A_c1 += 1 + (A_lvl1_crd[A_p1 * 4 >> 5] >> (A_p1 * 4 & 31) & 15)
                    j = A_c1
                    acc_1 += A_vals[np.uintp(A_p1)] * x[np.uintp(j)]
                for A_p1 in range(A_p1_mid, A_p1_stop):
                    A_c1 += 1 + (A_lvl1_crd[A_p1 * 4 >> 5] >> (A_p1 * 4 & 31) & 15)
                    j = A_c1
                    acc += A_vals[np.uintp(A_p1)] * x[np.uintp(j)]
                acc += acc_1
            else:
                for A_p1 in range(A_p1_start, A_p1_stop):
                    A_c1 += 1 + (A_lvl1_crd[A_p1 * 4 >> 5] >> (A_p1 * 4 & 31) & 15)
                    j = A_c1
                    acc += A_vals[np.uintp(A_p1)] * x[np.uintp(j)]
            y[np.uintp(i)] += acc


PLAN = [{'function': 'kernel_0', 'params': [['array', 'y'], ['pos', 'A', 1], ['crd', 'A', 1], ['vals', 'A'], ['array', 'x'], ['extent', 'i'], ['threads']], 'convert': {}, 'alias': {}, 'order': ['i', 'j'], 'sparse_output': False, 'rows': None, 'statement': 'y[i] += A[i, j] * x[j]', 'accumulate': True, 'overwrites': False, 'writer': 0, 'workspace': None}]
