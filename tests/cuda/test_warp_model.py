"""The lock-step warp model (``codegen.warp_model``): warp intrinsics lane by lane on
hand-written kernels, what it refuses (divergent shuffles, reads outside the mask, races,
out-of-bounds indices), generated warp kernels broken on purpose, and the whole CUDA
correctness matrix run with a GPU's schedules (256 threads a block, up to 4096 blocks)
against NumPy — the warp-level schedules among them, which Numba's simulator does not
run lock-step."""

from __future__ import annotations

import importlib.util
import re
import sys

import numpy as np
import pytest
from numba import cuda

from _spawn import failures, run_matrix
from ustc.codegen.warp_model import Kernel, ModelError, launch

FULL = 0xFFFFFFFF


def run(kernel, blocks, threads, *args):
    return Kernel(kernel)[blocks, threads, 0](*args)


# -- intrinsics ------------------------------------------------------------------------------

def warp_sums(out):
    v = cuda.grid(1) % 32 + 0.0
    offset = 16
    while offset:
        v += cuda.shfl_down_sync(FULL, v, offset)
        offset //= 2
    out[cuda.grid(1)] = v


def prefix_sums(out, x):
    t = cuda.grid(1)
    lane = cuda.laneid
    v = x[t]
    for d in range(5):
        up = cuda.shfl_up_sync(FULL, v, 1 << d)
        if lane >= (1 << d):
            v += up
    out[t] = v


def butterfly(out, x):
    t = cuda.grid(1)
    v = x[t]
    for k in range(5):
        v += cuda.shfl_xor_sync(FULL, v, 16 >> k)
    out[t] = v


def broadcast(out, x):
    t = cuda.grid(1)
    out[t] = cuda.shfl_sync(FULL, x[t], 3)


def votes(ballots, masks, alls, anys):
    t = cuda.grid(1)
    lane = cuda.threadIdx.x % 32
    ballots[t] = cuda.ballot_sync(FULL, lane % 3 == 0)
    alls[t] = cuda.all_sync(FULL, lane < 40)
    anys[t] = cuda.any_sync(FULL, lane == 31)
    if lane < 5:
        masks[t] = cuda.activemask()


def test_shfl_down_sums_each_warp():
    out = np.zeros(128)
    stats = run(warp_sums, 2, 64, out)
    v = list(range(32))                    # the hardware's rule, lane by lane: past the edge, your own
    for offset in (16, 8, 4, 2, 1):
        v = [v[k] + (v[k + offset] if k + offset < 32 else v[k]) for k in range(32)]
    assert out.tolist() == v * 4 and v[0] == 496
    assert stats.shuffles == 5 * 4     # five shuffle instructions in each of four warps


def test_shfl_up_prefix_sums_xor_butterfly_and_broadcast():
    x = np.arange(64, dtype=np.int64)
    out = np.zeros(64, np.int64)
    run(prefix_sums, 1, 64, out, x)
    assert np.array_equal(out, np.concatenate([np.cumsum(x[:32]), np.cumsum(x[32:])]))
    run(butterfly, 1, 64, out, x)
    assert np.array_equal(out, np.repeat([x[:32].sum(), x[32:].sum()], 32))
    run(broadcast, 1, 64, out, x)
    assert np.array_equal(out, np.repeat([3, 35], 32))


def test_ballot_activemask_all_any():
    ballots, masks = np.zeros(64, np.uint32), np.zeros(64, np.uint32)
    alls, anys = np.zeros(64, bool), np.zeros(64, bool)
    run(votes, 2, 32, ballots, masks, alls, anys)
    assert np.all(ballots == sum(1 << k for k in range(0, 32, 3)))
    assert np.all(masks[[0, 4, 32, 36]] == 0b11111) and masks[5] == 0
    assert alls.all() and anys.all()


def control(out, n):
    t = cuda.grid(1)
    if t >= n:
        return
    total = 0
    for k in range(t, 10 * n):
        if k % 2:
            continue
        if k > t + 6:
            break
        total += k
    j = 0
    while j < t:
        j += 3
    out[t] = total * 1000 + j


def test_break_continue_while_and_return_per_thread():
    out = np.full(40, -1, np.int64)
    run(control, 2, 32, out, 37)
    want = [sum(k for k in range(t, t + 7) if k % 2 == 0) * 1000 + -(-t // 3) * 3 for t in range(37)]
    assert out[:37].tolist() == want and np.all(out[37:] == -1)


def one_thread(out):
    out[cuda.grid(1)] = cuda.gridsize(1) * 10 + cuda.activemask()


def test_a_block_of_one_thread_is_a_warp_of_one_lane():
    out = np.zeros(4, np.int64)
    stats = run(one_thread, 3, 1, out)
    assert out[:3].tolist() == [31, 31, 31] and stats.threads == 1


def atomics(out, n):
    t = cuda.grid(1)
    if t < n:
        cuda.atomic.add(out, 0, 1.0)
        cuda.atomic.max(out, 1, t + 0.0)


def test_atomics_from_every_thread_add_up():
    out = np.zeros(2)
    stats = run(atomics, 4, 64, out, 200)
    assert out.tolist() == [200.0, 199.0] and stats.atomics == 400


# -- what the model refuses -----------------------------------------------------------------

def divergent_shuffle(out):
    v = cuda.grid(1) + 0.0
    if cuda.laneid < 16:
        v += cuda.shfl_down_sync(FULL, v, 1)
    out[cuda.grid(1)] = v


def half_warp_shuffle(out, delta):
    v = cuda.grid(1) + 0.0
    if cuda.laneid < 16:
        v += cuda.shfl_down_sync(0xFFFF, v, delta)
    out[cuda.grid(1)] = v


def unguarded_store(out):
    v = 1.0
    out[cuda.grid(1) // 32] += v


def late_race(out):
    t = cuda.grid(1)
    for k in range(t + 1):
        if k == 3:
            out[0] = t


def out_of_bounds(out, n):
    t = cuda.grid(1)
    if t <= n:
        out[np.uintp(t - 1)] = 1.0


def test_a_shuffle_in_a_divergent_branch_is_refused():
    with pytest.raises(ModelError, match="divergent"):
        run(divergent_shuffle, 1, 32, np.zeros(32))


def test_a_half_warp_mask_works_inside_the_half_and_refuses_reads_past_it():
    out = np.zeros(32)
    run(half_warp_shuffle, 1, 32, out, 0)
    assert np.array_equal(out[:16], 2 * np.arange(16.0))
    with pytest.raises(ModelError, match="outside the member mask"):
        run(half_warp_shuffle, 1, 32, out, 1)


def test_races_are_refused():
    with pytest.raises(ModelError, match="race on out"):
        run(unguarded_store, 1, 64, np.zeros(2))
    with pytest.raises(ModelError, match="race on out"):
        run(late_race, 1, 32, np.zeros(1, np.int64))      # thread 3 writes element 0, then thread 4 does


def test_out_of_bounds_indices_are_refused():
    with pytest.raises(ModelError, match="out of bounds"):
        run(out_of_bounds, 1, 32, np.zeros(8), 4)          # np.uintp(0 - 1) wraps past the end


def test_unmodelled_code_says_so():
    def shared(out):
        tile = cuda.shared.array(32, np.float64)  # noqa: F841
    with pytest.raises(ModelError):
        run(shared, 1, 32, np.zeros(1))


# -- generated kernels, intact and broken ---------------------------------------------------

def generated_csr_spmv(tmp_path, monkeypatch, schedule="warp_per_row:8"):
    """The CUDA module ustc generates for CSR SpMV, written to a file of our own."""
    import ustc
    from ustc.cli.compile_cmd import placeholders
    from ustc.ops import library, runtime

    monkeypatch.setenv("USTC_CACHE_DIR", str(tmp_path / "cache"))
    program, formats, _ = library.operation("spmv", [ustc.formats.CSR])
    bindings, _ = placeholders(program, formats)
    return runtime.prepare(program, bindings, "cuda", schedule).module_source()


def load(source: str, path):
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"model_case_{abs(hash(source))}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def csr(n=37, seed=3):
    rng = np.random.default_rng(seed)
    dense = np.where(rng.random((n, n)) < 0.3, rng.integers(1, 9, (n, n)), 0).astype(np.float64)
    pos = np.r_[0, np.cumsum((dense != 0).sum(1))].astype(np.int32)
    crd = np.nonzero(dense)[1].astype(np.int32)
    return dense, pos, crd, dense[dense != 0]


def spmv(module, n=37, log=None):
    dense, pos, crd, vals = csr(n)
    x, y = np.arange(n, dtype=np.float64), np.zeros(n)
    launch(module, "kernel_0", module.launch_kernel_0, y, pos, crd, vals, x, n, log=log)
    return y, dense @ x


def test_the_generated_warp_kernel_runs_lock_step(tmp_path, monkeypatch):
    source = generated_csr_spmv(tmp_path, monkeypatch)
    log = []
    got, want = spmv(load(source, tmp_path / "ok.py"), log=log)
    assert np.allclose(got, want) and log[0].shuffles > 0 and log[0].threads == 256


def test_generated_warp_kernels_broken_on_purpose_are_caught(tmp_path, monkeypatch):
    source = generated_csr_spmv(tmp_path, monkeypatch)
    # the shuffles moved under the row guard: warps whose last group has no row diverge
    guarded = re.sub(r"\n        (acc \+= cuda\.shfl_down_sync)", r"\n            \1", source)
    assert guarded != source
    with pytest.raises(ModelError, match="divergent"):
        spmv(load(guarded, tmp_path / "guarded.py"))
    # every lane stores its partial sum: the lanes of a row race
    unguarded = source.replace("if lane == 0 and i < n_i:", "if i < n_i:")
    assert unguarded != source
    with pytest.raises(ModelError, match="race on y"):
        spmv(load(unguarded, tmp_path / "unguarded.py"))


def test_generated_merge_path_kernel_with_a_plain_shared_row_races(tmp_path, monkeypatch):
    source = generated_csr_spmv(tmp_path, monkeypatch, "merge_path")
    got, want = spmv(load(source, tmp_path / "mp.py"), n=37)
    assert np.allclose(got, want)
    plain = source.replace("cuda.atomic.add(y, np.uintp(i), acc)", "y[np.uintp(i)] += acc")
    with pytest.raises(ModelError, match="race on y"):
        spmv(load(plain, tmp_path / "mp_plain.py"), n=37)


# -- the correctness matrix -------------------------------------------------------------------

def test_correctness_matrix_in_the_warp_model(tmp_path):
    records = run_matrix("model", tmp_path, simulator=False)
    assert len(records) >= 45
    assert not [r for r in records if not r["ok"]], failures(records)
    by_case = {r["case"]: r for r in records}
    warp = [r for r in records if "warp_per_row(" in r["schedules"][0]]
    assert {"spmv_csr", "spmv_csr_warp32", "spmv_csr_warp4", "spmv_skewed_auto_warp", "sum_axis1_csr"} <= \
        {r["case"] for r in warp}
    assert all(r["launches"][0]["shuffles"] > 0 for r in warp)
    merge = [r for r in records if r["schedules"][0].startswith("merge_path")]
    assert len(merge) >= 5 and all(r["launches"][0]["blocks"] == 4096 for r in merge)
    assert by_case["spmv_bsr32_tile_auto"]["launches"][0]["threads"] == 256
    assert all(launch["threads"] == 1 for launch in by_case["add_csr_dcsr"]["launches"])
