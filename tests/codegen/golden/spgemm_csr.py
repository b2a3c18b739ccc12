# golden file: C[i, j] = A[i, k] * B[k, j]

import numpy as np
from numba import njit, prange

from ustc.kernels._alloc import empty as _ustc_empty


@njit(cache=True, nogil=True, parallel=True)
def kernel_0(emit, C_crd0, C_crd1, C_vals, C_offsets, A_lvl1_pos, A_lvl1_crd, A_vals, B_lvl1_pos, B_lvl1_crd, B_vals, n_i, n_j, n_threads):
    """C[i, j] = A[i, k] * B[k, j]"""
    C_cap = len(C_vals)
    i_rows = max(n_i, 0)
    i_chunks = min(i_rows, n_threads)
    i_border = _ustc_empty(i_chunks + 1, np.intp)
    i_border[0] = 0
    i_border[np.uintp(i_chunks)] = i_rows
    if i_chunks > 1:
        # each row's work, summed up: i_border[c] is where chunk c's even share starts
        i_work = _ustc_empty(i_rows + 1, np.intp)
        i_work[0] = 0
        for i_u in prange(n_i):
            i = np.intp(i_u)
            i_w = 1
            for A_p1 in range(np.intp(A_lvl1_pos[np.uintp(i)]), np.intp(A_lvl1_pos[np.uintp(i + 1)])):
                k = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                i_w += np.intp(B_lvl1_pos[np.uintp(k + 1)]) - np.intp(B_lvl1_pos[np.uintp(k)])
            i_work[np.uintp(i + 1)] = i_w
        for i_r in range(i_rows):
            i_work[np.uintp(i_r + 1)] += i_work[np.uintp(i_r)]
        for i_chunk in range(1, i_chunks):
            i_goal = i_work[np.uintp(i_rows)] * i_chunk // i_chunks
            i_lo = i_border[np.uintp(i_chunk - 1)]
            i_hi = i_rows
            while i_lo < i_hi:
                i_mid = i_lo + i_hi >> 1
                if i_work[np.uintp(i_mid)] < i_goal:
                    i_lo = i_mid + 1
                else:
                    i_hi = i_mid
            i_border[np.uintp(i_chunk)] = i_lo
    for i_chunk_u in prange(i_chunks):
        i_chunk = np.intp(i_chunk_u)
        ws_j_vals = _ustc_empty(n_j, np.float64)
        ws_j_mark = np.zeros(n_j, dtype=np.bool_)
        ws_j_list = _ustc_empty(n_j, np.intp)
        ws_j_spare = _ustc_empty(n_j, np.intp)
        ws_j_bin = _ustc_empty(n_j + 1, np.intp)
        for i in range(i_border[np.uintp(i_chunk)], i_border[np.uintp(i_chunk + 1)]):
            C_n = C_offsets[np.uintp(i)] if emit else 0
            ws_j_n = 0
            for A_p1 in range(np.intp(A_lvl1_pos[np.uintp(i)]), np.intp(A_lvl1_pos[np.uintp(i + 1)])):
                k = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                for B_p1 in range(np.intp(B_lvl1_pos[np.uintp(k)]), np.intp(B_lvl1_pos[np.uintp(k + 1)])):
                    j = np.intp(B_lvl1_crd[np.uintp(B_p1)])
                    if ws_j_mark[np.uintp(j)]:
                        if emit:
                            ws_j_vals[np.uintp(j)] += A_vals[np.uintp(A_p1)] * B_vals[np.uintp(B_p1)]
                    else:
                        ws_j_mark[np.uintp(j)] = True
                        ws_j_list[np.uintp(ws_j_n)] = j
                        ws_j_n += 1
                        if emit:
                            ws_j_vals[np.uintp(j)] = A_vals[np.uintp(A_p1)] * B_vals[np.uintp(B_p1)]
            if emit:
                if ws_j_n <= 48:
                    for ws_j_t in range(1, ws_j_n):
                        ws_j_key = ws_j_list[np.uintp(ws_j_t)]
                        ws_j_q = ws_j_t - 1
                        while ws_j_q >= 0 and ws_j_list[np.uintp(ws_j_q)] > ws_j_key:
                            ws_j_list[np.uintp(ws_j_q + 1)] = ws_j_list[np.uintp(ws_j_q)]
                            ws_j_q = ws_j_q - 1
                        ws_j_list[np.uintp(ws_j_q + 1)] = ws_j_key
                else:
                    # a long row: read off the marks when dense in its span, else bucketed by high bits
                    ws_j_min = ws_j_list[0]
                    ws_j_max = ws_j_min
                    for ws_j_t in range(1, ws_j_n):
                        ws_j_key = ws_j_list[np.uintp(ws_j_t)]
                        ws_j_min = min(ws_j_min, ws_j_key)
                        ws_j_max = max(ws_j_max, ws_j_key)
                    if ws_j_max - ws_j_min < ws_j_n * 4:
                        ws_j_q = 0
                        for ws_j_key in range(ws_j_min, ws_j_max + 1):
                            if ws_j_mark[np.uintp(ws_j_key)]:
                                ws_j_list[np.uintp(ws_j_q)] = ws_j_key
                                ws_j_q += 1
                    else:
                        ws_j_shift = 0
                        while ws_j_max - ws_j_min >> ws_j_shift >= ws_j_n:
                            ws_j_shift += 1
                        ws_j_bins = (ws_j_max - ws_j_min >> ws_j_shift) + 1
                        for ws_j_t in range(ws_j_bins + 1):
                            ws_j_bin[np.uintp(ws_j_t)] = 0
                        for ws_j_t in range(ws_j_n):
                            ws_j_bin[np.uintp((ws_j_list[np.uintp(ws_j_t)] - ws_j_min >> ws_j_shift) + 1)] += 1
                        ws_j_fullest = 0
                        for ws_j_t in range(ws_j_bins):
                            ws_j_fullest = max(ws_j_fullest, ws_j_bin[np.uintp(ws_j_t + 1)])
                            ws_j_bin[np.uintp(ws_j_t + 1)] += ws_j_bin[np.uintp(ws_j_t)]
                        for ws_j_t in range(ws_j_n):
                            ws_j_key = ws_j_list[np.uintp(ws_j_t)]
                            ws_j_q = ws_j_key - ws_j_min >> ws_j_shift
                            ws_j_spare[np.uintp(ws_j_bin[np.uintp(ws_j_q)])] = ws_j_key
                            ws_j_bin[np.uintp(ws_j_q)] += 1
                        if ws_j_fullest <= 32:
                            for ws_j_t in range(1, ws_j_n):
                                ws_j_key = ws_j_spare[np.uintp(ws_j_t)]
                                ws_j_q = ws_j_t - 1
                                while ws_j_q >= 0 and ws_j_spare[np.uintp(ws_j_q)] > ws_j_key:
                                    ws_j_spare[np.uintp(ws_j_q + 1)] = ws_j_spare[np.uintp(ws_j_q)]
                                    ws_j_q = ws_j_q - 1
                                ws_j_spare[np.uintp(ws_j_q + 1)] = ws_j_key
                        else:
                            ws_j_spare[0:ws_j_n].sort()
                        for ws_j_t in range(ws_j_n):
                            ws_j_list[np.uintp(ws_j_t)] = ws_j_spare[np.uintp(ws_j_t)]
            for ws_j_t in range(ws_j_n):
                j = ws_j_list[np.uintp(ws_j_t)]
                ws_j_v = ws_j_vals[np.uintp(j)]
                ws_j_mark[np.uintp(j)] = False
                if emit and C_n < C_cap:
                    C_crd0[np.uintp(C_n)] = i
                    C_crd1[np.uintp(C_n)] = j
                    C_vals[np.uintp(C_n)] = ws_j_v
                C_n += 1
            if emit != 1:
                C_offsets[np.uintp(i + 1)] = C_n


@njit(cache=True, nogil=True)
def kernel_0_serial(emit, C_crd0, C_crd1, C_vals, C_offsets, A_lvl1_pos, A_lvl1_crd, A_vals, B_lvl1_pos, B_lvl1_crd, B_vals, n_i, n_j, n_threads):
    """C[i, j] = A[i, k] * B[k, j] (serial: for small operands)"""
    C_cap = len(C_vals)
    i_rows = max(n_i, 0)
    i_chunks = min(i_rows, n_threads)
    i_border = _ustc_empty(i_chunks + 1, np.intp)
    i_border[0] = 0
    i_border[np.uintp(i_chunks)] = i_rows
    if i_chunks > 1:
        # each row's work, summed up: i_border[c] is where chunk c's even share starts
        i_work = _ustc_empty(i_rows + 1, np.intp)
        i_work[0] = 0
        for i in range(n_i):
            i_w = 1
            for A_p1 in range(np.intp(A_lvl1_pos[np.uintp(i)]), np.intp(A_lvl1_pos[np.uintp(i + 1)])):
                k = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                i_w += np.intp(B_lvl1_pos[np.uintp(k + 1)]) - np.intp(B_lvl1_pos[np.uintp(k)])
            i_work[np.uintp(i + 1)] = i_w
        for i_r in range(i_rows):
            i_work[np.uintp(i_r + 1)] += i_work[np.uintp(i_r)]
        for i_chunk in range(1, i_chunks):
            i_goal = i_work[np.uintp(i_rows)] * i_chunk // i_chunks
            i_lo = i_border[np.uintp(i_chunk - 1)]
            i_hi = i_rows
            while i_lo < i_hi:
                i_mid = i_lo + i_hi >> 1
                if i_work[np.uintp(i_mid)] < i_goal:
                    i_lo = i_mid + 1
                else:
                    i_hi = i_mid
            i_border[np.uintp(i_chunk)] = i_lo
    for i_chunk in range(i_chunks):
        ws_j_vals = _ustc_empty(n_j, np.float64)
        ws_j_mark = np.zeros(n_j, dtype=np.bool_)
        ws_j_list = _ustc_empty(n_j, np.intp)
        ws_j_spare = _ustc_empty(n_j, np.intp)
        ws_j_bin = _ustc_empty(n_j + 1, np.intp)
        for i in range(i_border[np.uintp(i_chunk)], i_border[np.uintp(i_chunk + 1)]):
            C_n = C_offsets[np.uintp(i)] if emit else 0
            ws_j_n = 0
            for A_p1 in range(np.intp(A_lvl1_pos[np.uintp(i)]), np.intp(A_lvl1_pos[np.uintp(i + 1)])):
                k = np.intp(A_lvl1_crd[np.uintp(A_p1)])
                for B_p1 in range(np.intp(B_lvl1_pos[np.uintp(k)]), np.intp(B_lvl1_pos[np.uintp(k + 1)])):
                    j = np.intp(B_lvl1_crd[np.uintp(B_p1)])
                    if ws_j_mark[np.uintp(j)]:
                        if emit:
                            ws_j_vals[np.uintp(j)] += A_vals[np.uintp(A_p1)] * B_vals[np.uintp(B_p1)]
                    else:
                        ws_j_mark[np.uintp(j)] = True
                        ws_j_list[np.uintp(ws_j_n)] = j
                        ws_j_n += 1
                        if emit:
                            ws_j_vals[np.uintp(j)] = A_vals[np.uintp(A_p1)] * B_vals[np.uintp(B_p1)]
            if emit:
                if ws_j_n <= 48:
                    for ws_j_t in range(1, ws_j_n):
                        ws_j_key = ws_j_list[np.uintp(ws_j_t)]
                        ws_j_q = ws_j_t - 1
                        while ws_j_q >= 0 and ws_j_list[np.uintp(ws_j_q)] > ws_j_key:
                            ws_j_list[np.uintp(ws_j_q + 1)] = ws_j_list[np.uintp(ws_j_q)]
                            ws_j_q = ws_j_q - 1
                        ws_j_list[np.uintp(ws_j_q + 1)] = ws_j_key
                else:
                    # a long row: read off the marks when dense in its span, else bucketed by high bits
                    ws_j_min = ws_j_list[0]
                    ws_j_max = ws_j_min
                    for ws_j_t in range(1, ws_j_n):
                        ws_j_key = ws_j_list[np.uintp(ws_j_t)]
                        ws_j_min = min(ws_j_min, ws_j_key)
                        ws_j_max = max(ws_j_max, ws_j_key)
                    if ws_j_max - ws_j_min < ws_j_n * 4:
                        ws_j_q = 0
                        for ws_j_key in range(ws_j_min, ws_j_max + 1):
                            if ws_j_mark[np.uintp(ws_j_key)]:
                                ws_j_list[np.uintp(ws_j_q)] = ws_j_key
                                ws_j_q += 1
                    else:
                        ws_j_shift = 0
                        while ws_j_max - ws_j_min >> ws_j_shift >= ws_j_n:
                            ws_j_shift += 1
                        ws_j_bins = (ws_j_max - ws_j_min >> ws_j_shift) + 1
                        for ws_j_t in range(ws_j_bins + 1):
                            ws_j_bin[np.uintp(ws_j_t)] = 0
                        for ws_j_t in range(ws_j_n):
                            ws_j_bin[np.uintp((ws_j_list[np.uintp(ws_j_t)] - ws_j_min >> ws_j_shift) + 1)] += 1
                        ws_j_fullest = 0
                        for ws_j_t in range(ws_j_bins):
                            ws_j_fullest = max(ws_j_fullest, ws_j_bin[np.uintp(ws_j_t + 1)])
                            ws_j_bin[np.uintp(ws_j_t + 1)] += ws_j_bin[np.uintp(ws_j_t)]
                        for ws_j_t in range(ws_j_n):
                            ws_j_key = ws_j_list[np.uintp(ws_j_t)]
                            ws_j_q = ws_j_key - ws_j_min >> ws_j_shift
                            ws_j_spare[np.uintp(ws_j_bin[np.uintp(ws_j_q)])] = ws_j_key
                            ws_j_bin[np.uintp(ws_j_q)] += 1
                        if ws_j_fullest <= 32:
                            for ws_j_t in range(1, ws_j_n):
                                ws_j_key = ws_j_spare[np.uintp(ws_j_t)]
                                ws_j_q = ws_j_t - 1
                                while ws_j_q >= 0 and ws_j_spare[np.uintp(ws_j_q)] > ws_j_key:
                                    ws_j_spare[np.uintp(ws_j_q + 1)] = ws_j_spare[np.uintp(ws_j_q)]
                                    ws_j_q = ws_j_q - 1
                                ws_j_spare[np.uintp(ws_j_q + 1)] = ws_j_key
                        else:
                            ws_j_spare[0:ws_j_n].sort()
                        for ws_j_t in range(ws_j_n):
                            ws_j_list[np.uintp(ws_j_t)] = ws_j_spare[np.uintp(ws_j_t)]
            for ws_j_t in range(ws_j_n):
                j = ws_j_list[np.uintp(ws_j_t)]
                ws_j_v = ws_j_vals[np.uintp(j)]
                ws_j_mark[np.uintp(j)] = False
                if emit and C_n < C_cap:
                    C_crd0[np.uintp(C_n)] = i
                    C_crd1[np.uintp(C_n)] = j
                    C_vals[np.uintp(C_n)] = ws_j_v
                C_n += 1
            if emit != 1:
                C_offsets[np.uintp(i + 1)] = C_n


PLAN = [{'function': 'kernel_0', 'params': [['emit'], ['out_crd', 'C', 0], ['out_crd', 'C', 1], ['out_vals', 'C'], ['out_offsets', 'C'], ['pos', 'A', 1], ['crd', 'A', 1], ['vals', 'A'], ['pos', 'B', 1], ['crd', 'B', 1], ['vals', 'B'], ['extent', 'i'], ['extent', 'j'], ['threads']], 'convert': {}, 'alias': {}, 'order': ['i', 'k', 'j'], 'sparse_output': True, 'rows': 'i', 'statement': 'C[i, j] = A[i, k] * B[k, j]', 'accumulate': False, 'overwrites': False, 'writer': 0, 'workspace': 'j'}]
