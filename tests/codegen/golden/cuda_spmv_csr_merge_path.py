# golden file: y[i] += A[i, j] * x[j]

import numpy as np
from numba import config, cuda
from ustc.codegen.cuda_loads import ldg, ldg2, ldg4, ldg8, element_address


def blocks_for(work, threads, limit):
    """Blocks for `work` grid-stride iterations: at least 1, at most `limit`."""
    return max(1, min(limit, (work + threads - 1) // threads))


def bounds(threads, blocks):
    """cuda.jit launch bounds: at most `threads` a block, registers left for `blocks` blocks
    a multiprocessor (none in the CUDA simulator, whose cuda.jit takes none)."""
    return {} if config.ENABLE_CUDASIM else {"launch_bounds": (threads, blocks)}


# schedule: merge_path, 256 threads/block — requested
# promises: at most 128 registers a thread (2 blocks of 256 threads a multiprocessor), no warp shuffles, atomics, read-only loads
@cuda.jit(cache=True, **bounds(256, 2))
def kernel_0(y, A_lvl1_pos, A_lvl1_crd, A_vals, x, n_i):
    """y[i] += A[i, j] * x[j]"""
    # merge path: row ends and entries, merged in order, split evenly over the threads
    mp_tid = cuda.grid(1)
    mp_grid = cuda.gridsize(1)
    mp_first = 0
    mp_rows = n_i
    if mp_rows > 0:
        mp_base = np.intp(ldg(A_lvl1_pos, np.uintp(mp_first)))
        mp_entries = np.intp(ldg(A_lvl1_pos, np.uintp(mp_first + mp_rows - 1 + 1))) - mp_base
        mp_items = mp_rows + mp_entries
        mp_share = (mp_items + (mp_grid - 1)) // mp_grid
        mp_d0 = min(mp_tid * mp_share, mp_items)
        mp_d1 = min(mp_d0 + mp_share, mp_items)
        if mp_d0 < mp_d1:
            mp_lo = max(0, mp_d0 - mp_entries)
            mp_hi = min(mp_d0, mp_rows)
            while mp_lo < mp_hi:
                mp_mid = (mp_lo + mp_hi) // 2
                if np.intp(ldg(A_lvl1_pos, np.uintp(mp_first + mp_mid + 1))) - mp_base <= mp_d0 - mp_mid - 1:
                    mp_lo = mp_mid + 1
                else:
                    mp_hi = mp_mid
            mp_r0 = mp_lo
            mp_lo = max(0, mp_d1 - mp_entries)
            mp_hi = min(mp_d1, mp_rows)
            while mp_lo < mp_hi:
                mp_mid = (mp_lo + mp_hi) // 2
                if np.intp(ldg(A_lvl1_pos, np.uintp(mp_first + mp_mid + 1))) - mp_base <= mp_d1 - mp_mid - 1:
                    mp_lo = mp_mid + 1
                else:
                    mp_hi = mp_mid
            mp_r1 = mp_lo
            mp_k0 = mp_base + mp_d0 - mp_r0
            mp_k1 = mp_base + mp_d1 - mp_r1
            for mp_row in range(mp_r0, min(mp_r1 + 1, mp_rows)):
                i = mp_first + mp_row
                acc = 0.0
                mp_lo = max(np.intp(ldg(A_lvl1_pos, np.uintp(i))), mp_k0)
                mp_hi = min(np.intp(ldg(A_lvl1_pos, np.uintp(i + 1))), mp_k1)
                for A_p1 in range(mp_lo, mp_hi):
                    j = np.intp(ldg(A_lvl1_crd, np.uintp(A_p1)))
                    acc += ldg(A_vals, np.uintp(A_p1)) * ldg(x, np.uintp(j))
                if mp_lo < mp_hi:  # an empty piece adds nothing
                    if mp_row == mp_r0 or mp_row == mp_r1:  # a row the neighbouring threads may share
                        cuda.atomic.add(y, np.uintp(i), acc)
                    else:
                        y[np.uintp(i)] += acc


def launch_kernel_0(y, A_lvl1_pos, A_lvl1_crd, A_vals, x, n_i, stream=0):
    """Launch kernel_0 on `stream` (merge_path)."""
    kernel_0[4096, 256, stream](y, A_lvl1_pos, A_lvl1_crd, A_vals, x, n_i)


PLAN = [{'function': 'kernel_0', 'params': [['array', 'y'], ['pos', 'A', 1], ['crd', 'A', 1], ['vals', 'A'], ['array', 'x'], ['extent', 'i']], 'convert': {}, 'alias': {}, 'order': ['i', 'j'], 'sparse_output': False, 'rows': None, 'statement': 'y[i] += A[i, j] * x[j]', 'accumulate': True, 'overwrites': False, 'writer': 0, 'workspace': None}]
