"""Matrix Market reading and writing: ustc against SciPy (``scipy.io.mmread`` / ``mmwrite``).

Inputs, written once to a temporary directory by SciPy's ``mmwrite``, which lists a COO's
entries in its own order: a 300,000² matrix with 7,000,000 entries at uniform random positions
(float64), written twice: in random order (the order the positions were drawn, 290 duplicate
pairs kept) and sorted by column (``tocsc().tocoo()``, the order of most collections' files,
duplicates summed); and the 2-D 5-point Poisson matrix of side 1,000 (1M rows, 4,996,000
entries) written as symmetric (its lower triangle, by column). Calls, timed in alternating
rounds (``_common.interleaved_samples``: 3 rounds x 2 timed calls after one untimed call each),
median (interquartile range):

* ``ustc.from_file(path)``: the default, the entries in file order as ``mmread`` returns them
  (a symmetric file's mirrored entries appended), in the COO format that says the order found
  (canonical COO when sorted by row, else COO marked nonordered and nonunique);
* ``ustc.from_file(path, "COO")``: canonical COO (sorted by row, duplicates summed) whatever the
  file's order, against ``mmread(path)`` with ``sum_duplicates()`` (SciPy's canonical COO);
* ``ustc.from_file(path, "CSR")``;
* ``scipy.io.mmread(path)``: a COO in file order, duplicates kept (what ustc reads through);
  ``mmread(path).tocsr()`` for the CSR comparison;
* writing: ``ustc.to_file(A, path)`` (symmetry found from the entries) against
  ``scipy.io.mmwrite(path, csr)`` with the symmetry given.

Usage: ``python benchmarks/bench_io.py [--write]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np
import scipy.io as sio
import scipy.sparse as sp

from _common import interleaved_samples, machine, quartiles, write_section

import ustc


def _inputs(root: str) -> dict:
    rng = np.random.default_rng(0)
    n, nnz = 300_000, 7_000_000
    rand = sp.coo_array((rng.standard_normal(nnz), (rng.integers(0, n, nnz), rng.integers(0, n, nnz))),
                        shape=(n, n))
    side = 1000
    one = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(side, side))
    poisson = (sp.kron(sp.eye_array(side), one) + sp.kron(one, sp.eye_array(side))).tocsr()
    paths = {RANDOM: os.path.join(root, "random.mtx"), BY_COLUMN: os.path.join(root, "by_column.mtx"),
             POISSON: os.path.join(root, "poisson.mtx")}
    sio.mmwrite(paths[RANDOM], rand)
    sio.mmwrite(paths[BY_COLUMN], rand.tocsc().tocoo())
    sio.mmwrite(paths[POISSON], poisson, symmetry="symmetric")
    return {"paths": paths, "matrices": {RANDOM: rand.tocsr(), BY_COLUMN: rand.tocsr(), POISSON: poisson}}


RANDOM, BY_COLUMN = "random 300k², 7M entries, random order", "random 300k², 7M entries, by column"
POISSON = "Poisson 1M rows, symmetric"


def _canonical_coo(path):
    m = sio.mmread(path)
    m.sum_duplicates()
    return m


def _cell(samples: list[float]) -> str:
    q1, med, q3 = quartiles(samples)
    return f"{med:,.0f} ({q1:,.0f}–{q3:,.0f})"


def measure() -> list[list[str]]:
    rows = []
    with tempfile.TemporaryDirectory() as root:
        data = _inputs(root)
        for name, path in data["paths"].items():
            csr = data["matrices"][name]
            symmetry = "symmetric" if "symmetric" in name else "general"
            A = ustc.Tensor.from_package(csr)
            out_u, out_s = os.path.join(root, "u.mtx"), os.path.join(root, "s.mtx")
            fns = {"ustc default": lambda: ustc.from_file(path), "SciPy mmread": lambda: sio.mmread(path),
                   "ustc COO": lambda: ustc.from_file(path, "COO"),
                   "SciPy mmread().sum_duplicates()": lambda: _canonical_coo(path),
                   "ustc CSR": lambda: ustc.from_file(path, "CSR"), "SciPy mmread().tocsr()": lambda: sio.mmread(path).tocsr(),
                   "ustc write": lambda: ustc.to_file(A, out_u),
                   "SciPy write": lambda: sio.mmwrite(out_s, csr, symmetry=symmetry)}
            if name == BY_COLUMN:                  # the same matrix as RANDOM: written once
                del fns["ustc write"], fns["SciPy write"]
            got = ustc.from_file(path, "CSR").to_package()
            want = sio.mmread(path).tocsr()
            assert (got != want).nnz == 0, name
            (r, c), v = ustc.from_file(path).entries()
            assert (sp.coo_array((v, (r, c)), shape=csr.shape).tocsr() != want).nnz == 0, name
            samples = interleaved_samples(fns, rounds=3, per_round=2)
            med = {k: quartiles(v)[1] for k, v in samples.items()}
            for ours, theirs in (("ustc default", "SciPy mmread"), ("ustc COO", "SciPy mmread().sum_duplicates()"),
                                 ("ustc CSR", "SciPy mmread().tocsr()"),
                                 ("ustc write", "SciPy write")):
                if ours not in samples:
                    continue
                rows.append([name, ours, _cell(samples[ours]), theirs, _cell(samples[theirs]),
                             f"{med[ours] / med[theirs]:.2f}×"])
    return rows


def table(rows) -> str:
    head = "| input | ustc call | ms | SciPy call | ms | ustc / SciPy |\n|---|---|---|---|---|---|\n"
    return head + "\n".join("| " + " | ".join(r) + " |" for r in rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="record the table in docs/benchmarks.md")
    args = parser.parse_args()
    text = table(measure())
    print(text)
    if args.write:
        write_section("Matrix Market files", f"Measured on {machine()}.\n\n" + __doc__.split("\n\n")[1]
                      + "\n\n" + text)


if __name__ == "__main__":
    main()
