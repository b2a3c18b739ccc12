"""ustc.distributed on a LocalCluster of 2 workers x 1 thread: the 3-D 7-point stencil.

Measured (min of ``--repeat`` runs, the 1-minute load average printed beside each):
runtime start; partition + halo plan + per-block planning; CG ms per iteration for the
distributed SPMD solve, single-process ``ustc.solve`` and SciPy's ``cg`` loop (same
matrix, rtol 1e-6, the same right-hand side); scheduler transitions and synchronisations
per CG iteration; bytes per SpMV against the halo plan; worker memory against (own block +
ghosts + 6 vector slices); SpGEMM ``A @ A`` (distributed, single-process ``ustc.matmul``,
SciPy) with the rows and bytes it fetched against its plan; a power-law graph's bytes per
SpMV with row blocks and with a 2 x 2 ``Grid2D``, and both SpMVs' times; the stencil under
user labels (bytes per SpMV, CG) and CG and BiCGSTAB on a 1 x 2 ``Grid2D`` (synchronisations
per iteration); the same CG over the actor transport (the Dask actors calling each other, the
default before the direct sockets) and the cost of one synchronisation on both transports (CG
on a side-16 stencil, where the blocks' arithmetic is negligible); the side-40 target (CG ms
per iteration distributed against the mpi4py transport, alternating rounds, median and range
of the ratio); ``map`` over 400 items of >= 10 ms against a serial loop and a plain pool of 2
processes (alternating rounds: median and range of each ratio, and the CPU time of an item
serially and on the workers); the CPU seconds of each kind of thread (block threads, worker event
loops, socket readers, the driver's event loop) during one side-114 solve.

Usage: ``python benchmarks/bench_distributed.py [--side 114] [--repeat 3] [--power-law 200000] [--write]``;
``--write`` replaces the results section of docs/distributed.md. ``--only map``, ``--only side40``,
``--only shm`` / ``shm40`` / ``shm16`` (CG per iteration under mpi4py, over TCP and over the
shared-memory rings, alternating rounds, on the side-114 / 40 / 16 stencil),
``--only grid40`` (the labels and grid lines on the side-40 stencil) or ``--only cpu40`` (the CPU
of each kind of thread during a side-40 solve) runs that section alone (never with ``--write``).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ROOT = pathlib.Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- bench_distributed: begin -->", "<!-- bench_distributed: end -->"


def stencil(side: int) -> sp.csr_matrix:
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(side, side), format="csr")
    e = sp.eye(side, format="csr")
    return (sp.kron(sp.kron(t, e), e) + sp.kron(sp.kron(e, t), e) + sp.kron(sp.kron(e, e), t)).tocsr()


def load() -> str:
    return "load %.2f" % os.getloadavg()[0]


def power_law(n: int, mean_degree: int = 8, seed: int = 0) -> sp.csr_matrix:
    """A random graph whose column popularity follows a Pareto law (a few hub columns)."""
    rng = np.random.default_rng(seed)
    weight = rng.pareto(1.2, n) + 1
    cols = rng.choice(n, size=n * mean_degree, p=weight / weight.sum())
    rows = np.repeat(np.arange(n), mean_degree)
    g = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n))
    g.sum_duplicates()
    return (g + sp.eye(n, format="csr") * mean_degree).tocsr()


def best_of(repeat: int, fn):
    """(min seconds, last result) of ``repeat`` calls of ``fn``."""
    best, out = None, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
        best = dt if best is None or dt < best else best
    return best, out


def spgemm(say, ud, ustc, d, a, t, repeat):
    """Distributed A @ A against ustc.matmul and SciPy; fetched rows and bytes against the plan."""
    t0 = time.perf_counter()
    mm = ud.Matmul(d, d)
    info = mm.plan()
    c = mm.execute()
    first = time.perf_counter() - t0
    c.free()
    before = mm.counters()
    best, c = best_of(repeat, mm.execute)
    moved = sum(x["bytes"] - y["bytes"] for x, y in zip(mm.counters(), before)) // repeat
    single, ct = best_of(repeat, lambda: ustc.matmul(t, t))
    ref, cs = best_of(repeat, lambda: a @ a)
    v = np.random.default_rng(1).standard_normal(a.shape[1])
    same = bool(np.allclose(c @ v, cs @ v, rtol=1e-12, atol=1e-12))        # C's own distributed SpMV
    say(f"SpGEMM A @ A ({cs.nnz:,} nonzeros): distributed plan + execute {first:.2f} s, execute min {best:.3f} s; "
        f"ustc.matmul min {single:.3f} s; SciPy min {ref:.3f} s; {load()}")
    say(f"SpGEMM fetched {info['rows']:,} rows of B, {info['entries']:,} entries in {info['messages']} messages: "
        f"{info['bytes']:,} bytes per execute (plan), {moved:,} moved; C v equals SciPy's: {same}")
    c.free()
    mm.free()


def grid_vs_rows(say, ud, ustc, n, repeat):
    """A power-law graph: bytes per SpMV with 4 row blocks and a 2 x 2 grid, and both SpMVs' times."""
    g = power_law(n)
    t = ustc.Tensor.from_package(g)
    x = np.ones(n)
    rows = ud.DTensor.from_tensor(t, 4)
    grid = ud.GridTensor.from_tensor(t, ud.Grid2D(n, n, 2, 2))
    one, two = ud.Matmul(rows, x), ud.GridMatmul(grid, x)
    i1, i2 = one.plan(), two.plan()
    t1, y1 = best_of(repeat, lambda: one.execute(gather=True))
    t2, y2 = best_of(repeat, two.execute)
    say(f"power-law graph {n:,} rows, {g.nnz:,} nonzeros, 4 blocks: row blocks {i1['bytes']:,} bytes per SpMV "
        f"(ghosts per block {i1['ghosts']}), Grid2D 2x2 {i2['bytes']:,} bytes; SpMV min {1e3 * t1:.1f} ms vs "
        f"{1e3 * t2:.1f} ms (results equal: {np.allclose(y1, y2)}); {load()}")
    rows.free()
    grid.free()
    for p in (16, 64):
        side = int(round(p ** 0.5))
        plan = ud.GridPlan.of(ud.Grid2D(n, n, side, side), 8)
        say(f"  the same graph on {p} blocks (counted on the driver): row blocks {halo_entries(g, p):,} entries "
            f"per SpMV, Grid2D {side}x{side} {plan.x_entries + plan.y_entries:,}")


def labels_and_grid_cg(say, ud, ustc, a, b, side, repeat):
    """The stencil under user labels (2 parts): bytes per SpMV (plan and sent) for labels that cut
    the cube across its fastest axis (rows interleaved, two planes of halo, as slabs) and for
    round-robin labels, and CG ms per iteration with the first against the same matrix in row
    blocks; then CG and BiCGSTAB on a 1 x 2 ``Grid2D`` (sparse exchange): synchronisations per
    iteration."""
    n = a.shape[0]
    t = ustc.Tensor.from_package(a)
    z = np.arange(n) % side
    labels = {"cut across the fastest axis": ud.Labels((z >= side // 2).astype(np.int64), 2),
              "round robin (row % 2)": ud.Labels(np.arange(n) % 2, 2)}
    ref = None
    for name, lab in labels.items():
        d = ud.DTensor.from_tensor(t, lab)
        mm = ud.Matmul(d, np.ones(n))
        info = mm.plan()
        before = mm.counters()
        mm.execute()
        sent = sum(x["bytes"] - y["bytes"] for x, y in zip(mm.counters(), before))
        line = (f"labels {name}: {info['messages']} messages, {info['bytes']:,} bytes per SpMV (sent {sent:,}), "
                f"parts {d.rows.sizes().tolist()}")
        if ref is None:
            best, out = best_of(repeat, lambda: ud.solve(d, b, "cg", rtol=1e-6, return_info=True))
            ref = out
            line += (f"; CG {out[1].iterations} iterations, min {1e3 * best / max(out[1].iterations, 1):.2f} ms "
                     f"per iteration, {out[1].syncs} synchronisations")
        say(line + f"; {load()}")
        d.free()
    grid = ud.GridTensor.from_tensor(t, ud.Grid2D(n, n, 1, 2))
    best, (x, info) = best_of(repeat, lambda: ud.solve(grid, b, "cg", rtol=1e-6, return_info=True))
    plan = grid.sparse_info()
    say(f"CG on Grid2D 1x2 (sparse exchange, {plan['bytes']:,} bytes per product): {info.iterations} iterations, "
        f"min {1e3 * best / max(info.iterations, 1):.2f} ms per iteration; synchronisations {info.syncs} = "
        f"{(info.syncs - 5) / max(info.iterations, 1):.2f} per iteration + 5 before the loop; x vs labels "
        f"{np.linalg.norm(x - ref[0]) / np.linalg.norm(ref[0]):.1e}; {load()}")
    best, (_, info) = best_of(repeat, lambda: ud.solve(grid, b, "bicgstab", rtol=1e-6, return_info=True))
    say(f"BiCGSTAB on Grid2D 1x2 (one synchronisation per product): {info.iterations} iterations, min "
        f"{1e3 * best / max(info.iterations, 1):.2f} ms per iteration; synchronisations {info.syncs} (8 an "
        f"iteration + 4 before the loop: {8 * info.iterations + 4}, 4 fewer when it stops on s mid-iteration; "
        f"the full exchange took 10 an iteration); {load()}")
    grid.free()


def halo_entries(g: sp.csr_matrix, parts: int) -> int:
    """The 1-D halo of ``g`` split into ``parts`` even row blocks: the distinct columns each
    block's rows touch outside its own range, summed."""
    n = g.shape[0]
    bounds = [n * b // parts for b in range(parts + 1)]
    total = 0
    for lo, hi in zip(bounds, bounds[1:]):
        used = np.unique(g.indices[g.indptr[lo]:g.indptr[hi]])
        total += int(np.count_nonzero((used < lo) | (used >= hi)))
    return total


def mpi_child(side: int, repeat: int) -> None:
    """Under ``mpiexec -n 2``: CG on the stencil with the mpi4py transport
    (:class:`ustc.distributed.mpiblocks.MPIMatrix`, the block workers' own code); rank 0 prints
    one JSON line: iterations and the minimum ms per iteration."""
    import json

    from mpi4py import MPI

    from ustc.distributed.mpiblocks import MPIMatrix

    a = stencil(side)
    with MPIMatrix.from_loader(lambda r0, r1: a[r0:r1], a.shape) as m:
        lo, hi = m.range
        b = np.ones(hi - lo)
        best, its = None, 0
        for _ in range(repeat):
            m.comm.comm.Barrier()
            t0 = time.perf_counter()
            _, info = m.solve(b, "cg", rtol=1e-6)
            per = 1e3 * (time.perf_counter() - t0) / max(info["iterations"], 1)
            per = m.comm.comm.allreduce(per, op=MPI.MAX)
            best, its = (per if best is None else min(best, per)), info["iterations"]
        if m.rank == 0:
            print(json.dumps({"iterations": its, "ms": best}), flush=True)


def mpi_cg(side: int, repeat: int):
    """``(iterations, ms per iteration)`` of :func:`mpi_child` run under ``mpiexec -n 2`` (one
    thread per process, as the Dask workers), or ``(None, reason)``."""
    import json
    import shutil
    import subprocess

    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    mpiexec = here if os.path.exists(here) else shutil.which("mpiexec")
    if mpiexec is None:
        return None, "no mpiexec (pip install mpich mpi4py)"
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.run([mpiexec, "-n", "2", sys.executable, os.path.abspath(__file__), "--mpi-child",
                           "--side", str(side), "--repeat", str(repeat)], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return None, f"mpiexec failed: {proc.stderr.strip()[-300:]}"
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["iterations"], out["ms"]


def transports(say, ud, ustc, t, b, repeat):
    """CG on the side-114 matrix ``t`` over the actor transport (a second runtime), and ms per
    synchronisation on both transports from CG on a side-16 stencil (3 per iteration)."""
    small = ustc.Tensor.from_package(stencil(16))
    ones = np.ones(small.shape[0])
    per_sync = {}
    for name, rt in (("direct", ud.runtime()), ("actor", ud.Runtime(n_workers=2, transport="actor"))):
        if name == "actor":
            d = ud.DTensor.from_tensor(t, 2, runtime=rt)
            best, (_, info) = best_of(repeat, lambda: ud.solve(d, b, "cg", rtol=1e-6, return_info=True))
            say(f"CG distributed over the actor transport: {info.iterations} iterations, min "
                f"{1e3 * best / info.iterations:.2f} ms per iteration; {load()}")
            d.free()
        ds = ud.DTensor.from_tensor(small, 2, runtime=rt)
        best, (_, info) = best_of(3 * repeat, lambda: ud.solve(ds, ones, "cg", rtol=1e-10, return_info=True))
        per_sync[name] = 1e3 * best / info.syncs
        ds.free()
        if name == "actor":
            rt.close()
    say(f"one synchronisation (CG on the side-16 stencil, time / synchronisations): {ud.runtime().transport} "
        f"transport {1e3 * per_sync['direct']:.0f} us, actor calls {1e3 * per_sync['actor']:.0f} us; {load()}")


#: entries of the shared operand of :func:`busy`: ~13 ms an item on the project machine
BUSY_SIZE = 150_000


def busy(item, shared):
    """>= 10 ms of single-threaded NumPy work on one item."""
    x = shared + item
    for _ in range(10):
        x = np.sin(x)
    return float(x.sum())


def busy_timed(item, shared):
    """:func:`busy` and the CPU seconds of its thread."""
    t0 = time.thread_time()
    value = busy(item, shared)
    return value, time.thread_time() - t0


def busy_chunk(items, shared):
    return [busy(i, shared) for i in items]


def spread(values, fmt="{:.2f}") -> str:
    """``median (min-max)`` of ``values``."""
    v = sorted(values)
    return f"{fmt.format(float(np.median(v)))} ({fmt.format(v[0])}-{fmt.format(v[-1])})"


def map_throughput(say, ud, rounds):
    """``map`` over 400 items of >= 10 ms against a serial loop and against a plain pool of 2
    spawned processes over the same 16 chunks (what 2 processes of this machine give, no Dask),
    in alternating rounds: each ratio's median and range over the rounds, the median CPU
    time of an item in the serial loop and on the workers (where the time goes: an item that
    takes more CPU when both cores work slows the workers, not the scheduling), and the driver
    process's CPU seconds during the map and during the pool's run (the idle cluster's)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    shared = np.random.default_rng(0).standard_normal(BUSY_SIZE)
    items = list(range(400))
    bounds = [len(items) * c // 16 for c in range(17)]
    chunks = [items[lo:hi] for lo, hi in zip(bounds, bounds[1:])]
    ud.map(busy, items[:8], shared=shared)                          # the workers import this module
    ratios, pools, serial_s, map_s, cpu_serial, cpu_map, drivers = [], [], [], [], [], [], []
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(busy_chunk, chunks[:2], [shared] * 2))
        for _ in range(max(rounds, 3)):
            t0 = time.perf_counter()
            serial = [busy_timed(i, shared) for i in items]
            ts = time.perf_counter() - t0
            t0, c0 = time.perf_counter(), time.process_time()
            par = ud.map(busy_timed, items, shared=shared)
            tp, c1 = time.perf_counter() - t0, time.process_time()
            t0 = time.perf_counter()
            pooled = [v for c in pool.map(busy_chunk, chunks, [shared] * len(chunks)) for v in c]
            tq = time.perf_counter() - t0
            drivers.append((c1 - c0, time.process_time() - c1))
            assert np.allclose([v for v, _ in par], [v for v, _ in serial]) and np.allclose(pooled, [v for v, _ in serial])
            ratios.append(ts / tp)
            pools.append(ts / tq)
            serial_s.append(ts)
            map_s.append(tp)
            cpu_serial.append(1e3 * float(np.median([c for _, c in serial])))
            cpu_map.append(1e3 * float(np.median([c for _, c in par])))
    say(f"map over {len(items)} items of {1e3 * np.median(serial_s) / len(items):.1f} ms ({len(ratios)} alternating "
        f"rounds, median (min-max)): serial {spread(serial_s)} s, map on 2 workers {spread(map_s)} s: "
        f"{spread(ratios)}x serial throughput (target 1.7x); a plain pool of 2 processes {spread(pools)}x; "
        f"CPU per item serial {spread(cpu_serial, '{:.1f}')} ms, on the workers {spread(cpu_map, '{:.1f}')} ms; "
        f"the driver's CPU (its scheduler and nannies included) during a map {spread([d for d, _ in drivers])} s, "
        f"during the pool's run {spread([d for _, d in drivers])} s; {load()}")


def side40(say, ud, ustc, rounds):
    """The side-40 target: CG ms per iteration distributed (the default transport) against the mpi4py
    transport (the same block code under ``mpiexec -n 2``), alternating rounds; the ratio's
    median and range (target <= 3x)."""
    a = stencil(40)
    b = np.ones(a.shape[0])
    d = ud.DTensor.from_tensor(ustc.Tensor.from_package(a), 2)
    dist, mpi, its = [], [], None
    for _ in range(max(rounds, 3)):
        best, (_, info) = best_of(3, lambda: ud.solve(d, b, "cg", rtol=1e-6, return_info=True))
        dist.append(1e3 * best / max(info.iterations, 1))
        its, ms = mpi_cg(40, 3)
        if its is None:
            say(f"side 40: CG distributed {spread(dist)} ms per iteration; mpi4py transport not measured ({ms})")
            d.free()
            return
        mpi.append(ms)
    ratios = [x / y for x, y in zip(dist, mpi)]
    say(f"side 40 ({a.shape[0]:,} rows; {info.iterations} iterations, mpi4py {its}; {len(ratios)} alternating rounds, "
        f"median (min-max) of each round's min of 3): CG distributed {spread(dist)} ms per iteration, mpi4py "
        f"{spread(mpi)}: distributed / mpi4py {spread(ratios)}x (target <= 3x); {load()}")
    d.free()


def thread_cpu() -> dict:
    """CPU seconds of this process's threads, summed by kind: ``block`` (the block actors' threads),
    ``reader`` (the socket reader threads), ``loop`` (the event loop: a worker's main thread, the
    driver's "IO loop" running the scheduler, the nannies and the client), ``other``."""
    import threading

    import psutil

    names = {t.native_id: t.name for t in threading.enumerate()}
    out = {"block": 0.0, "reader": 0.0, "loop": 0.0, "other": 0.0}
    for t in psutil.Process().threads():
        name = names.get(t.id, "")
        kind = ("block" if name.startswith("ustc-block") else "reader" if name.startswith("ustc-sock")
                else "loop" if name in ("MainThread", "IO loop") else "other")
        out[kind] += t.user_time + t.system_time
    return out


def solve_cpu(say, ud, d, b, rtol=1e-6):
    """CPU seconds of each kind of thread (:func:`thread_cpu`) on the workers and in the driver
    during one distributed CG solve, against its wall time: where the cores went besides the
    blocks' own work."""
    rt = d.runtime
    before, drv0 = rt.client.run(thread_cpu), thread_cpu()
    t0 = time.perf_counter()
    _, info = ud.solve(d, b, "cg", rtol=rtol, return_info=True)
    wall = time.perf_counter() - t0
    after, drv1 = rt.client.run(thread_cpu), thread_cpu()
    per = [{k: after[w][k] - before[w][k] for k in after[w]} for w in sorted(after)]

    def kind(k):
        return ", ".join(f"{p[k]:.2f}" for p in per)
    say(f"CPU s during one distributed CG solve ({info.iterations} iterations, wall {wall:.2f} s): block threads "
        f"{kind('block')}; worker event loops {kind('loop')}; socket readers {kind('reader')}; worker other "
        f"{kind('other')}; driver event loop (scheduler, nannies, client) {drv1['loop'] - drv0['loop']:.2f}; {load()}")


def shm_rounds(say, ud, ustc, rounds, side=114):
    """The side-114 target by transport: CG ms per iteration under ``mpiexec -n 2`` (mpi4py),
    over direct TCP connections (``transport="socket"``) and over shared-memory rings between the
    blocks of one host (``transport="shm"``, what the default ``"auto"`` picks on one host), in
    alternating rounds, each with no other cluster alive (a fresh 2-worker runtime per
    measurement); the ratios to mpi4py per round, median and range."""
    ud.shutdown()
    a = stencil(side)
    b = np.ones(a.shape[0])
    t = ustc.Tensor.from_package(a)
    got = {"shm": [], "tcp": [], "mpi": []}
    for r in range(max(rounds, 1)):
        its, ms = mpi_cg(side, 3)
        if its is None:
            say(f"side {side}: mpi4py transport not measured ({ms})")
            return
        got["mpi"].append(ms)
        order = (("shm", "shm"), ("tcp", "socket"))
        for name, transport in order if r % 2 == 0 else order[::-1]:
            rt = ud.Runtime(n_workers=2, transport=transport)
            try:
                d = ud.DTensor.from_tensor(t, 2, runtime=rt)
                ud.solve(d, b, "cg", rtol=1e-6)            # warm
                best, (_, info) = best_of(3, lambda: ud.solve(d, b, "cg", rtol=1e-6, return_info=True))
                got[name].append(1e3 * best / max(info.iterations, 1))
                d.free()
            finally:
                rt.close()
        say(f"  round {r + 1}: mpi4py {got['mpi'][-1]:.2f}, shared memory {got['shm'][-1]:.2f}, tcp "
            f"{got['tcp'][-1]:.2f} ms per iteration: {got['shm'][-1] / got['mpi'][-1]:.2f}x / "
            f"{got['tcp'][-1] / got['mpi'][-1]:.2f}x mpi4py; {load()}")
    shm = [x / y for x, y in zip(got["shm"], got["mpi"])]
    tcp = [x / y for x, y in zip(got["tcp"], got["mpi"])]
    say(f"side {side} ({a.shape[0]:,} rows, {its} iterations; {len(shm)} alternating rounds, median (min-max) of "
        f"each round's min of 3): CG mpi4py {spread(got['mpi'])} ms per iteration, distributed over shared memory "
        f"{spread(got['shm'])} ({spread(shm)}x mpi4py), over TCP {spread(got['tcp'])} ({spread(tcp)}x; target "
        f"<= 1.3x); {load()}")


#: sections ``--only`` runs alone: ``(say, ud, ustc, rounds)``
def cpu40(say, ud, ustc, rounds):
    """:func:`solve_cpu` on the side-40 stencil."""
    d = ud.DTensor.from_tensor(ustc.Tensor.from_package(stencil(40)), 2)
    ud.solve(d, np.ones(40 ** 3), "cg", rtol=1e-6)            # compiled and warm
    for _ in range(rounds):
        solve_cpu(say, ud, d, np.ones(40 ** 3))
    d.free()


ALONE = {"map": lambda say, ud, ustc, rounds: map_throughput(say, ud, rounds), "side40": side40, "cpu40": cpu40,
         "shm": shm_rounds, "shm40": lambda say, ud, ustc, rounds: shm_rounds(say, ud, ustc, rounds, 40),
         "shm16": lambda say, ud, ustc, rounds: shm_rounds(say, ud, ustc, rounds, 16),
         "grid40": lambda say, ud, ustc, rounds: labels_and_grid_cg(say, ud, ustc, stencil(40), np.ones(40 ** 3), 40,
                                                                    rounds)}


def main():
    import ustc
    import ustc.distributed as ud

    ap = argparse.ArgumentParser()
    ap.add_argument("--side", type=int, default=114)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--power-law", type=int, default=200_000, help="rows of the power-law graph")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--only", choices=sorted(ALONE), help="run one section alone (no --write)")
    ap.add_argument("--mpi-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.mpi_child:
        return mpi_child(args.side, args.repeat)
    if args.only:
        if args.write:
            ap.error("--only measures one section: --write needs the whole run")
        ud.connect(n_workers=2)
        try:
            return ALONE[args.only](lambda text: print(text, flush=True), ud, ustc, args.repeat)
        finally:
            ud.shutdown()
    lines = []

    def say(text):
        print(text, flush=True)
        lines.append(text)

    side, n = args.side, args.side ** 3
    a = stencil(side)
    b = np.ones(n)
    t = ustc.Tensor.from_package(a)
    say(f"stencil side {side}: {n:,} rows, {a.nnz:,} nonzeros; machine: {os.cpu_count()} cores; {load()}")

    # before the cluster starts: an idle LocalCluster takes ~0.15 of a core, which the MPI ranks
    # (one a core) would otherwise lose
    mpi_its, mpi_ms = mpi_cg(side, args.repeat)
    mpi_load = load()
    t0 = time.perf_counter()
    rt = ud.connect(n_workers=2)
    rt.group(2)
    start = time.perf_counter() - t0
    say(f"runtime start (LocalCluster 2 x 1 thread, actors connected): {start:.2f} s; {load()}")

    setup = []
    d = None
    for _ in range(args.repeat):
        if d is not None:
            d.free()                     # the memory figures below count one matrix
        t0 = time.perf_counter()
        d = ud.DTensor.from_tensor(t, 2)
        mm = ud.Matmul(d, np.ones(n))
        info = mm.plan()
        setup.append(time.perf_counter() - t0)
    say(f"partition + halo plan + per-block planning (scatter from the driver included): min {min(setup):.2f} s; {load()}")
    say(f"halo plan: {info['messages']} messages, {info['entries']:,} entries, {info['bytes']:,} bytes per SpMV; "
        f"ghosts per block {info['ghosts']}")
    before = mm.counters()
    mm.execute()
    after = mm.counters()
    sent = sum(x["bytes"] - y["bytes"] for x, y in zip(after, before))
    say(f"bytes one SpMV sent: {sent:,} (plan: {info['bytes']:,})")

    def dist():
        return ud.solve(d, b, "cg", rtol=1e-6, return_info=True)

    def single():
        return ustc.solve(t, b, "cg", rtol=1e-6, return_info=True)

    counter = {"it": 0}

    def scipy_cg():
        counter["it"] = 0

        def cb(_):
            counter["it"] += 1
        x, _ = spla.cg(a, b, rtol=1e-6, maxiter=10 * n, callback=cb)
        return x, counter["it"]

    results = {}
    for name, fn in (("distributed", dist), ("ustc.solve", single), ("scipy cg", scipy_cg)):
        best, its, out = None, None, None
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            out = fn()
            dt = time.perf_counter() - t0
            it = out[1].iterations if name != "scipy cg" else out[1]
            per = 1e3 * dt / max(it, 1)
            best = per if best is None or per < best else best
            its = it
        results[name] = (best, its, out)
        say(f"CG {name}: {its} iterations, min {best:.2f} ms per iteration; {load()}")
    xd, info_d = results["distributed"][2]
    x1, info_1 = results["ustc.solve"][2]
    say(f"distributed vs single process: iterations {info_d.iterations} vs {info_1.iterations}, "
        f"x relative difference {np.linalg.norm(xd - x1) / np.linalg.norm(x1):.2e}")
    say(f"scheduler transitions during the solve: {info_d.scheduler_transitions}; synchronisations "
        f"{info_d.syncs} = {(info_d.syncs - 4) / info_d.iterations:.2f} per iteration + 4 before the loop")
    solve_cpu(say, ud, d, b)
    if mpi_its is None:
        say(f"CG mpi4py transport: not measured ({mpi_ms})")
    else:
        say(f"CG mpi4py transport (mpiexec -n 2, the same block code, measured before the cluster started): "
            f"{mpi_its} iterations, min {mpi_ms:.2f} ms per iteration; {mpi_load}")
    mpi_ratio = (f", distributed / mpi4py {results['distributed'][0] / mpi_ms:.2f}x" if mpi_its is not None else "")
    say(f"ratios: distributed / ustc.solve {results['distributed'][0] / results['ustc.solve'][0]:.2f}x, "
        f"SciPy cg / distributed {results['scipy cg'][0] / results['distributed'][0]:.2f}x{mpi_ratio}")

    mem = d.group.call("memory")
    import psutil
    rss = rt.client.run(lambda: psutil.Process().memory_info().rss)
    for rank, m in enumerate(mem):
        nb = d.rows.range(rank)
        expect = m["blocks"] + 6 * (nb[1] - nb[0]) * 8
        say(f"block {rank}: block + ghosts {m['blocks'] / 2**20:.1f} MiB, vectors held {m['vectors'] / 2**20:.1f} MiB, "
            f"(block + ghosts + 6 slices) {expect / 2**20:.1f} MiB")
    say("worker RSS (interpreter, NumPy, Numba and Dask included): "
        + ", ".join(f"{v / 2**20:.0f} MiB" for v in rss.values()))

    side40(say, ud, ustc, args.repeat)
    transports(say, ud, ustc, t, b, args.repeat)
    labels_and_grid_cg(say, ud, ustc, a, b, side, args.repeat)
    spgemm(say, ud, ustc, d, a, t, args.repeat)
    grid_vs_rows(say, ud, ustc, args.power_law, args.repeat)

    map_throughput(say, ud, args.repeat)
    ud.shutdown()

    if args.write:
        doc = ROOT / "docs" / "distributed.md"
        text = doc.read_text()
        body = "\n".join(["```", *lines, "```"])
        lo, hi = text.index(BEGIN) + len(BEGIN), text.index(END)
        doc.write_text(text[:lo] + "\n" + body + "\n" + text[hi:])


if __name__ == "__main__":
    main()
