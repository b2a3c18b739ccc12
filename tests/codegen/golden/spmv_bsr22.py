# golden file: y[i] += A[i, j] * x[j]

import numpy as np
from numba import njit, prange

from ustc.kernels._alloc import empty as _ustc_empty


@njit(cache=True, nogil=True, parallel=True)
def kernel_0(y, A_lvl0_size, A_lvl1_pos, A_lvl1_crd, A_lvl2_size, A_lvl3_size, A_vals, x, n_i, n_j, n_threads):
    """y[i] += A[i, j] * x[j]"""
    v_i_div2_rows = max(A_lvl0_size, 0)
    v_i_div2_chunks = min(v_i_div2_rows, n_threads)
    v_i_div2_border = _ustc_empty(v_i_div2_chunks + 1, np.intp)
    v_i_div2_border[0] = 0
    v_i_div2_border[np.uintp(v_i_div2_chunks)] = v_i_div2_rows
    if v_i_div2_chunks > 1:
        # a row's work is its entries and 1: A_lvl1_pos[r] + r is the work before row r, v_i_div2_border[c] where chunk c's even share starts
        v_i_div2_first = np.intp(A_lvl1_pos[0])
        v_i_div2_total = np.intp(A_lvl1_pos[np.uintp(v_i_div2_rows)]) + v_i_div2_rows - v_i_div2_first
        for v_i_div2_chunk in range(1, v_i_div2_chunks):
            v_i_div2_goal = v_i_div2_first + v_i_div2_total * v_i_div2_chunk // v_i_div2_chunks
            v_i_div2_lo = v_i_div2_border[np.uintp(v_i_div2_chunk - 1)]
            v_i_div2_hi = v_i_div2_rows
            while v_i_div2_lo < v_i_div2_hi:
                v_i_div2_mid = v_i_div2_lo + v_i_div2_hi >> 1
                if np.intp(A_lvl1_pos[np.uintp(v_i_div2_mid)]) + v_i_div2_mid < v_i_div2_goal:
                    v_i_div2_lo = v_i_div2_mid + 1
                else:
                    v_i_div2_hi = v_i_div2_mid
            v_i_div2_border[np.uintp(v_i_div2_chunk)] = v_i_div2_lo
    for v_i_div2_chunk_u in prange(v_i_div2_chunks):
        v_i_div2_chunk = np.intp(v_i_div2_chunk_u)
        v_i_div2_end = np.intp(A_lvl1_pos[np.uintp(v_i_div2_border[np.uintp(v_i_div2_chunk)])])
        for v_i_div2 in range(v_i_div2_border[np.uintp(v_i_div2_chunk)], v_i_div2_border[np.uintp(v_i_div2_chunk + 1)]):
            v_i_div2_begin = v_i_div2_end
            v_i_div2_end = np.intp(A_lvl1_pos[np.uintp(v_i_div2 + 1)])
            for A_p1 in range(v_i_div2_begin, v_i_div2_end):
                v_j_div2 = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                for v_i_mod2 in range(max(0, -(2 * v_i_div2)), min(A_lvl2_size, n_i - 2 * v_i_div2)):
                    i = 2 * v_i_div2 + v_i_mod2
                    A_p2 = A_p1 * A_lvl2_size + v_i_mod2
                    acc = 0.0
                    v_j_mod2_start = max(0, -(2 * v_j_div2))
                    v_j_mod2_stop = min(A_lvl3_size, n_j - 2 * v_j_div2)
                    if v_j_mod2_stop - v_j_mod2_start >= 16:
                        v_j_mod2_mid = v_j_mod2_start + (v_j_mod2_stop - v_j_mod2_start & -2)
                        acc_1 = 0.0
                        for v_j_mod2_2 in range(v_j_mod2_start, v_j_mod2_mid, 2):
                            v_j_mod2 = v_j_mod2_2
                            j = 2 * v_j_div2 + v_j_mod2
                            A_p3 = A_p2 * A_lvl3_size + v_j_mod2
                            acc += A_vals[np.uintp(A_p3)] * x[np.uintp(j)]
                            v_j_mod2 = v_j_mod2_2 + 1
                            j = 2 * v_j_div2 + v_j_mod2
                            A_p3 = A_p2 * A_lvl3_size + v_j_mod2
                            acc_1 += A_vals[np.uintp(A_p3)] * x[np.uintp(j)]
                        for v_j_mod2 in range(v_j_mod2_mid, v_j_mod2_stop):
                            j = 2 * v_j_div2 + v_j_mod2
                            A_p3 = A_p2 * A_lvl3_size + v_j_mod2
                            acc += A_vals[np.uintp(A_p3)] * x[np.uintp(j)]
                        acc += acc_1
                    else:
                        for v_j_mod2 in range(v_j_mod2_start, v_j_mod2_stop):
                            j = 2 * v_j_div2 + v_j_mod2
                            A_p3 = A_p2 * A_lvl3_size + v_j_mod2
                            acc += A_vals[np.uintp(A_p3)] * x[np.uintp(j)]
                    y[np.uintp(i)] += acc


@njit(cache=True, nogil=True)
def kernel_0_serial(y, A_lvl0_size, A_lvl1_pos, A_lvl1_crd, A_lvl2_size, A_lvl3_size, A_vals, x, n_i, n_j, n_threads):
    """y[i] += A[i, j] * x[j] (serial: for small operands)"""
    v_i_div2_rows = max(A_lvl0_size, 0)
    v_i_div2_chunks = min(v_i_div2_rows, n_threads)
    v_i_div2_border = _ustc_empty(v_i_div2_chunks + 1, np.intp)
    v_i_div2_border[0] = 0
    v_i_div2_border[np.uintp(v_i_div2_chunks)] = v_i_div2_rows
    if v_i_div2_chunks > 1:
        # a row's work is its entries and 1: A_lvl1_pos[r] + r is the work before row r, v_i_div2_border[c] where chunk c's even share starts
        v_i_div2_first = np.intp(A_lvl1_pos[0])
        v_i_div2_total = np.intp(A_lvl1_pos[np.uintp(v_i_div2_rows)]) + v_i_div2_rows - v_i_div2_first
        for v_i_div2_chunk in range(1, v_i_div2_chunks):
            v_i_div2_goal = v_i_div2_first + v_i_div2_total * v_i_div2_chunk // v_i_div2_chunks
            v_i_div2_lo = v_i_div2_border[np.uintp(v_i_div2_chunk - 1)]
            v_i_div2_hi = v_i_div2_rows
            while v_i_div2_lo < v_i_div2_hi:
                v_i_div2_mid = v_i_div2_lo + v_i_div2_hi >> 1
                if np.intp(A_lvl1_pos[np.uintp(v_i_div2_mid)]) + v_i_div2_mid < v_i_div2_goal:
                    v_i_div2_lo = v_i_div2_mid + 1
                else:
                    v_i_div2_hi = v_i_div2_mid
            v_i_div2_border[np.uintp(v_i_div2_chunk)] = v_i_div2_lo
    for v_i_div2_chunk in range(v_i_div2_chunks):
        v_i_div2_end = np.intp(A_lvl1_pos[np.uintp(v_i_div2_border[np.uintp(v_i_div2_chunk)])])
        for v_i_div2 in range(v_i_div2_border[np.uintp(v_i_div2_chunk)], v_i_div2_border[np.uintp(v_i_div2_chunk + 1)]):
            v_i_div2_begin = v_i_div2_end
            v_i_div2_end = np.intp(A_lvl1_pos[np.uintp(v_i_div2 + 1)])
            for A_p1 in range(v_i_div2_begin, v_i_div2_end):
                v_j_div2 = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                for v_i_mod2 in range(max(0, -(2 * v_i_div2)), min(A_lvl2_size, n_i - 2 * v_i_div2)):
                    i = 2 * v_i_div2 + v_i_mod2
                    A_p2 = A_p1 * A_lvl2_size + v_i_mod2
                    acc = 0.0
                    v_j_mod2_start = max(0, -(2 * v_j_div2))
                    v_j_mod2_stop = min(A_lvl3_size, n_j - 2 * v_j_div2)
                    if v_j_mod2_stop - v_j_mod2_start >= 16:
                        v_j_mod2_mid = v_j_mod2_start + (v_j_mod2_stop - v_j_mod2_start & -2)
                        acc_1 = 0.0
                        for v_j_mod2_2 in range(v_j_mod2_start, v_j_mod2_mid, 2):
                            v_j_mod2 = v_j_mod2_2
                            j = 2 * v_j_div2 + v_j_mod2
                            A_p3 = A_p2 * A_lvl3_size + v_j_mod2
                            acc += A_vals[np.uintp(A_p3)] * x[np.uintp(j)]
                            v_j_mod2 = v_j_mod2_2 + 1
                            j = 2 * v_j_div2 + v_j_mod2
                            A_p3 = A_p2 * A_lvl3_size + v_j_mod2
                            acc_1 += A_vals[np.uintp(A_p3)] * x[np.uintp(j)]
                        for v_j_mod2 in range(v_j_mod2_mid, v_j_mod2_stop):
                            j = 2 * v_j_div2 + v_j_mod2
                            A_p3 = A_p2 * A_lvl3_size + v_j_mod2
                            acc += A_vals[np.uintp(A_p3)] * x[np.uintp(j)]
                        acc += acc_1
                    else:
                        for v_j_mod2 in range(v_j_mod2_start, v_j_mod2_stop):
                            j = 2 * v_j_div2 + v_j_mod2
                            A_p3 = A_p2 * A_lvl3_size + v_j_mod2
                            acc += A_vals[np.uintp(A_p3)] * x[np.uintp(j)]
                    y[np.uintp(i)] += acc


PLAN = [{'function': 'kernel_0', 'params': [['array', 'y'], ['size', 'A', 0], ['pos', 'A', 1], ['crd', 'A', 1], ['size', 'A', 2], ['size', 'A', 3], ['vals', 'A'], ['array', 'x'], ['extent', 'i'], ['extent', 'j'], ['threads']], 'convert': {}, 'alias': {}, 'order': ['v_i_div2', 'v_j_div2', 'v_i_mod2', 'v_j_mod2'], 'sparse_output': False, 'rows': None, 'statement': 'y[i] += A[i, j] * x[j]', 'accumulate': True, 'overwrites': False, 'writer': 0, 'workspace': None}]
